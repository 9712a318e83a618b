package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/internal/render"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// CheckWriter writes a head's check run (a *ghapp.Client).
type CheckWriter interface {
	CreateCheckRun(ctx context.Context, owner, repo string, r ghapp.CheckRun) (int64, error)
	UpdateCheckRun(ctx context.Context, owner, repo string, id int64, r ghapp.CheckRun) error
	FindCheckRun(ctx context.Context, owner, repo, sha, name string) (int64, error)
}

// CheckWriters hands out an installation's CheckWriter.
type CheckWriters interface {
	CheckWriter(installation int64) (CheckWriter, error)
}

// CheckWriter returns the installation's client as a CheckWriter.
func (i Installations) CheckWriter(installation int64) (CheckWriter, error) {
	c, err := i.App.Client(installation)
	if err != nil {
		return nil, err
	}
	return c, nil
}

var (
	_ CheckWriter  = (*ghapp.Client)(nil)
	_ CheckWriters = Installations{}
)

// CheckStore keeps a head's check run id and paces its updates (a
// *store.Store).
type CheckStore interface {
	GetRun(ctx context.Context, pr jobs.PR) (store.Run, error)
	Posted(ctx context.Context, pr jobs.PR, what string) (int64, error)
	SetPosted(ctx context.Context, pr jobs.PR, what string, id int64) error
	Throttle(ctx context.Context, pr jobs.PR, what string, every time.Duration) (bool, error)
}

var _ CheckStore = (*store.Store)(nil)

// ChecksConfig configures Checks.
type ChecksConfig struct {
	// GitHub writes the check runs. Required.
	GitHub CheckWriters
	// Store keeps the run ids and paces updates. Required.
	Store CheckStore
	// Turns paces the writes in the installation's write lane. Required.
	Turns Turns
	// Name is the check run's name. Defaults to "prq review".
	Name string
	// Every is the least time between two progress updates of one pull
	// request, across processes. Defaults to 5s.
	Every time.Duration
	// WebURL is GitHub's web address, for the link to the summary
	// comment. Defaults to https://github.com.
	WebURL string
	// Log defaults to discarding.
	Log *slog.Logger
}

// Checks shows a pull request head's progress as a GitHub check run:
// queued when planned, in progress with "n of m" as files finish (paced),
// completed with the result and a link to the summary. It needs the App
// permission checks: write; without it, check runs are skipped (logged
// once per installation) and nothing else is affected.
type Checks struct {
	cfg    ChecksConfig
	denied sync.Map // installation -> true: the App may not write checks there
}

// NewChecks returns Checks.
func NewChecks(cfg ChecksConfig) (*Checks, error) {
	if cfg.GitHub == nil || cfg.Store == nil || cfg.Turns == nil {
		return nil, errors.New("workers: checks: GitHub, Store and Turns are required")
	}
	if cfg.Name == "" {
		cfg.Name = "prq review"
	}
	if cfg.Every <= 0 {
		cfg.Every = 5 * time.Second
	}
	if cfg.WebURL == "" {
		cfg.WebURL = "https://github.com"
	}
	cfg.Log = logOrDiscard(cfg.Log)
	return &Checks{cfg: cfg}, nil
}

func (c *Checks) key(head string) string { return "check:" + head }

// write runs one check-run write in the installation's lane; a refusal
// for lack of permission turns check runs off for the installation.
func (c *Checks) write(ctx context.Context, pr jobs.PR, fn func(CheckWriter) error) error {
	if _, no := c.denied.Load(pr.Installation); no {
		return nil
	}
	gh, err := c.cfg.GitHub.CheckWriter(pr.Installation)
	if err != nil {
		return err
	}
	err = c.cfg.Turns.Do(ctx, pr.Installation, CheckWrite, func() error { return fn(gh) })
	if errors.Is(err, ghapp.ErrForbidden) {
		c.denied.Store(pr.Installation, true)
		c.cfg.Log.WarnContext(ctx, "the App may not write check runs here (permission checks: write); progress is shown in the summary only", "installation", pr.Installation)
		return nil
	}
	return err
}

// errCreating: another job is creating the head's check run right now.
var errCreating = errors.New("workers: the check run is being created by another job")

// id returns the head's check run, creating it queued if it has none.
// One job creates it: the planner's Queued, a file's Progress and
// finalize's Complete can all find none at once, and each would create
// its own; the others get errCreating.
func (c *Checks) id(ctx context.Context, gh CheckWriter, pr jobs.PR, head, summary string) (int64, error) {
	id, err := c.cfg.Store.Posted(ctx, pr, c.key(head))
	if err != nil || id != 0 {
		return id, err
	}
	if ok, err := c.cfg.Store.Throttle(ctx, pr, c.key(head)+":create", 30*time.Second); err != nil || !ok {
		if err == nil {
			err = errCreating
		}
		return 0, err
	}
	// a crash after creating and before recording: find it by name
	if id, err = gh.FindCheckRun(ctx, pr.Owner, pr.Repo, head, c.cfg.Name); err != nil {
		return 0, err
	}
	if id == 0 {
		if id, err = gh.CreateCheckRun(ctx, pr.Owner, pr.Repo, ghapp.CheckRun{Name: c.cfg.Name, HeadSHA: head, Status: "queued",
			Title: "Waiting for the model", Summary: summary}); err != nil {
			return 0, err
		}
	}
	return id, c.cfg.Store.SetPosted(ctx, pr, c.key(head), id)
}

// Queued shows a freshly planned head as queued. Failures are logged.
func (c *Checks) Queued(ctx context.Context, pr jobs.PR, head string, jobs int) {
	err := c.write(ctx, pr, func(gh CheckWriter) error {
		_, err := c.id(ctx, gh, pr, head, fmt.Sprintf("%d file jobs planned.", jobs))
		return err
	})
	if err != nil && !errors.Is(err, errCreating) {
		c.cfg.Log.WarnContext(ctx, "could not create the check run", "pr", pr.String(), "err", err)
	}
}

// Progress updates a head's check run with the files done, at most once
// per Every per pull request. Failures are logged.
func (c *Checks) Progress(ctx context.Context, pr jobs.PR, head string) {
	ok, err := c.cfg.Store.Throttle(ctx, pr, c.key(head), c.cfg.Every)
	if err != nil || !ok {
		return
	}
	err = c.write(ctx, pr, func(gh CheckWriter) error {
		// The turn in the write lane may come late: read the run now, so
		// the counts are fresh and a finished or superseded head is left
		// to finalize (an update after its completion would take the run
		// back to in progress), and pace again at the write itself, so
		// updates reach GitHub at least Every apart whatever the waits.
		run, err := c.cfg.Store.GetRun(ctx, pr)
		if err != nil || run.Head != head || run.SummaryDone+run.ReviewDone >= run.SummaryTotal+run.ReviewTotal {
			return err
		}
		if ok, err := c.cfg.Store.Throttle(ctx, pr, c.key(head)+":sent", c.cfg.Every); err != nil || !ok {
			return err
		}
		summary := progressText(run)
		id, err := c.id(ctx, gh, pr, head, summary)
		if err != nil {
			return err
		}
		return gh.UpdateCheckRun(ctx, pr.Owner, pr.Repo, id, ghapp.CheckRun{Name: c.cfg.Name, Status: "in_progress",
			Title: fmt.Sprintf("%d of %d files", min(run.SummaryDone, run.SummaryTotal), run.SummaryTotal), Summary: summary})
	})
	if err != nil && !errors.Is(err, errCreating) {
		c.cfg.Log.WarnContext(ctx, "could not update the check run", "pr", pr.String(), "err", err)
	}
}

func progressText(run store.Run) string {
	s := fmt.Sprintf("Summarised %d of %d files.", run.SummaryDone, run.SummaryTotal)
	if run.ReviewTotal > 0 {
		s += fmt.Sprintf(" Reviewed %d of %d file parts.", run.ReviewDone, run.ReviewTotal)
	}
	return s
}

// Complete finishes a head's check run with the review's outcome and a
// link to the summary comment. A rate limit or transient error is
// returned (finalize retries; its other writes are idempotent).
func (c *Checks) Complete(ctx context.Context, pr jobs.PR, head string, rows []render.File, comments int, summaryID int64) error {
	var reviewed, failed int
	for _, r := range rows {
		if r.Reviewed {
			reviewed++
		}
		if r.Failed {
			failed++
		}
	}
	conclusion, title := "success", fmt.Sprintf("%d files summarised", len(rows))
	switch {
	case failed > 0:
		conclusion, title = "neutral", fmt.Sprintf("%d files could not be processed", failed)
	case comments > 0:
		conclusion, title = "neutral", fmt.Sprintf("%d comments on %d reviewed files", comments, reviewed)
	case reviewed > 0:
		title = fmt.Sprintf("No problems found in %d files", reviewed)
	}
	link := ""
	if summaryID > 0 {
		link = fmt.Sprintf("%s/%s/%s/pull/%d#issuecomment-%d", c.cfg.WebURL, pr.Owner, pr.Repo, pr.Number, summaryID)
	}
	summary := title + "."
	if link != "" {
		summary += " See the summary comment: " + link
	}
	return c.write(ctx, pr, func(gh CheckWriter) error {
		id, err := c.id(ctx, gh, pr, head, summary)
		if errors.Is(err, errCreating) {
			return &RetryAfterError{After: 2 * time.Second, Err: err} // its id is recorded in a moment
		}
		if err != nil {
			return err
		}
		return gh.UpdateCheckRun(ctx, pr.Owner, pr.Repo, id, ghapp.CheckRun{Name: c.cfg.Name, Status: "completed", Conclusion: conclusion,
			Title: title, Summary: summary, DetailsURL: link})
	})
}
