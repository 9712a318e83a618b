package workers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	return i.forge(installation)
}

var (
	_ CheckWriter  = (*ghapp.Client)(nil)
	_ CheckWriters = Installations{}
)

// CheckStore keeps a head's check run id, its failures, and paces its
// updates (a *store.Store).
type CheckStore interface {
	GetRun(ctx context.Context, pr jobs.PR) (store.Run, error)
	Posted(ctx context.Context, pr jobs.PR, what string) (int64, error)
	PostedEach(ctx context.Context, pr jobs.PR, whats ...string) ([]int64, error)
	SetPosted(ctx context.Context, pr jobs.PR, what string, id int64) error
	Throttle(ctx context.Context, pr jobs.PR, what string, every time.Duration) (bool, error)
	Lock(ctx context.Context, pr jobs.PR, what, owner string, ttl time.Duration) (release func(), ok bool, err error)
}

var _ CheckStore = (*store.Store)(nil)

// The decorations a check run makes: the kind label of
// prq_github_decoration_errors_total.
const (
	DecorationCheckQueued   = "check_run_queued"   // created queued when planned
	DecorationCheckProgress = "check_run_progress" // "n of m files" as files finish
	DecorationCheckComplete = "check_run_complete" // completed when published
	DecorationCheckWaiting  = "check_run_waiting"  // where a waiting head stands: its place in the queue, or the quota's reset
)

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
	// GitLabURL is GitLab's web address, for the link on a GitLab
	// tenant's commit status. Defaults to https://gitlab.com.
	GitLabURL string
	// Timeout bounds each check-run call to GitHub. Defaults to 10s.
	Timeout time.Duration
	// LaneWait is the longest a queued or progress update waits for its
	// turn in the installation's write lane (behind chat replies,
	// summaries and reviews); past it the update is skipped. Defaults to 5s.
	LaneWait time.Duration
	// Tries is how many failed tries of one kind (created queued,
	// progress, completion) a head's check run gets before that kind is
	// given up for the head. Defaults to 3.
	Tries int
	// OffFor is how long check runs stay off, in this process, for an
	// installation GitHub refused them (403: the App lacks checks: write)
	// or a repository where the API is not there (404). Defaults to 10m.
	OffFor time.Duration
	// ErrorFunc, when set, counts failed check-run writes by decoration
	// kind and status (prq_github_decoration_errors_total).
	ErrorFunc func(kind, status string)
	// NowFunc is the clock of OffFor and of the process's own pacing of
	// progress updates. Defaults to time.Now.
	NowFunc func() time.Time
	// Log defaults to discarding.
	Log *slog.Logger
}

// Checks shows a pull request head's progress as a GitHub check run:
// queued when planned, in progress with "n of m" as files finish (paced),
// completed with the result and a link to the summary once the summary
// and review are posted. A check run is a decoration: its writes wait
// behind chat replies, summaries and reviews in the installation's write
// lane, and any failure of theirs (403, 404, 422, 5xx, a timeout) is
// counted, logged once per installation and kind, and given up (at once
// for a refusal, after Tries for a failure); nothing else is affected.
type Checks struct {
	cfg    ChecksConfig
	off    sync.Map // offKey -> time.Time: check runs are off there until then
	logged sync.Map // "installation|kind" -> true: its failure was logged
	paced  sync.Map // "pr|head" -> time.Time: this process paced the head's progress until then
	pacedN atomic.Int64
}

// NewChecks returns Checks.
func NewChecks(cfg ChecksConfig) (*Checks, error) {
	if cfg.GitHub == nil || cfg.Store == nil || cfg.Turns == nil {
		return nil, errors.New("workers: checks: GitHub, Store and Turns are required")
	}
	if cfg.Every < 0 || cfg.Timeout < 0 || cfg.LaneWait < 0 || cfg.Tries < 0 || cfg.OffFor < 0 {
		return nil, errors.New("workers: checks: Every, Timeout, LaneWait, Tries and OffFor must not be negative")
	}
	if cfg.Name == "" {
		cfg.Name = "prq review"
	}
	if cfg.Every == 0 {
		cfg.Every = 5 * time.Second
	}
	if cfg.GitLabURL == "" {
		cfg.GitLabURL = "https://gitlab.com"
	}
	if cfg.WebURL == "" {
		cfg.WebURL = "https://github.com"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.LaneWait == 0 {
		cfg.LaneWait = 5 * time.Second
	}
	if cfg.Tries == 0 {
		cfg.Tries = 3
	}
	if cfg.OffFor == 0 {
		cfg.OffFor = 10 * time.Minute
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	cfg.Log = logOrDiscard(cfg.Log)
	return &Checks{cfg: cfg}, nil
}

func (c *Checks) key(head string) string { return "check:" + head }

// offKey names where check runs are off: an installation or a repository.
func offInstallation(inst int64) string { return "inst:" + strconv.FormatInt(inst, 10) }
func offRepository(pr jobs.PR) string {
	return "repo:" + strconv.FormatInt(pr.Installation, 10) + ":" + pr.Owner + "/" + pr.Repo
}

// isOff reports whether the head's check-run writes of kind are given up:
// off for the installation or repository here, off for the head (a
// refusal), or the kind's tries spent; in the same read, id is the
// head's check run as recorded (0: none yet).
func (c *Checks) isOff(ctx context.Context, pr jobs.PR, head, kind string) (off bool, id int64, err error) {
	if c.offHere(pr) {
		return true, 0, nil
	}
	v, err := c.cfg.Store.PostedEach(ctx, pr, c.key(head)+":off", c.key(head)+":fails:"+kind, c.key(head))
	if err != nil {
		return false, 0, err
	}
	return v[0] != 0 || v[1] >= int64(c.cfg.Tries), v[2], nil
}

// offHere reports whether check runs are off for the pull request's
// installation or repository in this process.
func (c *Checks) offHere(pr jobs.PR) bool {
	now := c.cfg.NowFunc()
	for _, k := range []string{offInstallation(pr.Installation), offRepository(pr)} {
		if until, ok := c.off.Load(k); ok {
			if now.Before(until.(time.Time)) {
				return true
			}
			c.off.CompareAndDelete(k, until)
		}
	}
	return false
}

// errCreating: another job is creating the head's check run right now.
var errCreating = errors.New("workers: the check run is being created by another job")

// write runs one check-run write of kind in the installation's lane,
// each GitHub call within Timeout, unless the kind is given up for the
// head, or, with update, the head has no check run recorded yet. fn gets
// the head's check run id as recorded before the write's turn (0: none
// then). A failure of GitHub's is the decoration's (see failed). It
// returns nil when the write is done, skipped or given up; errCreating
// when another job is creating the run; a *RetryAfterError when the
// write may be tried again later.
func (c *Checks) write(ctx context.Context, pr jobs.PR, head, kind string, class WriteClass, update bool, fn func(context.Context, CheckWriter, int64) error) error {
	off, id, err := c.isOff(ctx, pr, head, kind)
	if err != nil || off || (update && id == 0) {
		return err
	}
	gh, err := c.cfg.GitHub.CheckWriter(pr.Installation)
	if err != nil {
		return err
	}
	lane := ctx
	if class == CheckWrite {
		var cancel context.CancelFunc
		lane, cancel = context.WithTimeout(ctx, c.cfg.LaneWait)
		defer cancel()
	}
	ran, skipped := false, false
	err = c.cfg.Turns.Do(lane, pr.Installation, class, func() error {
		ran = true
		if skipped = c.offHere(pr); skipped {
			return nil // turned off while this write waited for its turn
		}
		call, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
		return fn(call, gh, id)
	})
	var refused *ghapp.InstallationRefusedError
	switch {
	case err == nil && skipped:
		return nil
	case err == nil:
		c.logged.Delete(strconv.FormatInt(pr.Installation, 10) + "|" + kind) // log its next failure again
		return nil
	case ctx.Err() != nil:
		return ctx.Err() // shutting down: the job runs again
	case !ran && class == CheckWrite:
		// the lane is busy with results: this update is skipped
		c.cfg.Log.DebugContext(ctx, "check run update skipped: the installation's write lane is busy", "pr", pr.String(), "kind", kind)
		return nil
	case !ran, errors.Is(err, errCreating), errors.As(err, &refused):
		return err
	}
	return c.failed(ctx, pr, head, kind, err)
}

// failed handles a check-run write GitHub failed: it is counted and
// logged once per installation and kind; a refusal gives check runs up
// at once (403: for the installation; 404: for the repository, the API
// is not there; another 4xx: for the head), any other failure after
// Tries of the kind for the head, each earlier one asking to be retried.
func (c *Checks) failed(ctx context.Context, pr jobs.PR, head, kind string, err error) error {
	status := decorationStatus(err)
	if c.cfg.ErrorFunc != nil {
		c.cfg.ErrorFunc(kind, status)
	}
	code, now := ghapp.Status(err), c.cfg.NowFunc()
	what := ""
	var retry error
	switch {
	case code == http.StatusForbidden:
		c.off.Store(offInstallation(pr.Installation), now.Add(c.cfg.OffFor))
		what = "check runs are off for the installation for " + c.cfg.OffFor.String() + " (the App needs the permission checks: write)"
	case code == http.StatusNotFound:
		c.off.Store(offRepository(pr), now.Add(c.cfg.OffFor))
		what = "check runs are off for the repository for " + c.cfg.OffFor.String() + " (GitHub has no check-runs API there)"
	case code >= 400 && code < 500 && code != http.StatusTooManyRequests:
		if serr := c.cfg.Store.SetPosted(ctx, pr, c.key(head)+":off", 1); serr != nil {
			return serr
		}
		what = "the head's check run is given up"
	default:
		key := c.key(head) + ":fails:" + kind
		fails, serr := c.cfg.Store.Posted(ctx, pr, key)
		if serr == nil {
			serr = c.cfg.Store.SetPosted(ctx, pr, key, fails+1)
		}
		if serr != nil {
			return serr
		}
		if fails+1 >= int64(c.cfg.Tries) {
			what = fmt.Sprintf("given up for the head after %d tries", fails+1)
			break
		}
		after := time.Duration(1<<fails) * 2 * time.Second
		var rl *ghapp.RateLimitedError
		if errors.As(err, &rl) {
			after = max(after, rl.RetryAfter)
		}
		what = fmt.Sprintf("tried again (%d of %d tries)", fails+1, c.cfg.Tries)
		retry = &RetryAfterError{After: after, Err: err}
	}
	if _, seen := c.logged.LoadOrStore(strconv.FormatInt(pr.Installation, 10)+"|"+kind, true); !seen {
		c.cfg.Log.WarnContext(ctx, "a check-run write failed; check runs are decorations: summaries, reviews and replies go on without them",
			"installation", pr.Installation, "pr", pr.String(), "kind", kind, "status", status, "then", what, "err", err)
	}
	return retry
}

// decorationStatus is the status label of a failed decoration write:
// GitHub's HTTP status, rate_limited, timeout, network (no answer) or
// other.
func decorationStatus(err error) string {
	var rl *ghapp.RateLimitedError
	var ne net.Error
	switch code := ghapp.Status(err); {
	case errors.As(err, &rl):
		return "rate_limited"
	case code > 0:
		return strconv.Itoa(code)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, new(*ghapp.TransientError)):
		return "network"
	}
	return "other"
}

// create finds the head's check run (known, when the caller read it
// already), or creates it as r, and records its id; created says it was
// created (so it is in r's state already). One
// job creates it at a time, across processes: the planner's Queued and
// finalize's Complete (when Queued failed, was skipped, or waits still)
// can both find none at once, and each would create its own; the other
// gets errCreating.
func (c *Checks) create(ctx context.Context, gh CheckWriter, pr jobs.PR, head string, known int64, r ghapp.CheckRun) (id int64, created bool, err error) {
	if known != 0 {
		return known, false, nil
	}
	if id, err = c.cfg.Store.Posted(ctx, pr, c.key(head)); err != nil || id != 0 {
		return id, false, err
	}
	release, ok, err := c.cfg.Store.Lock(ctx, pr, c.key(head)+":create", owner(), createLockTTL)
	if err != nil {
		return 0, false, err
	}
	if !ok {
		return 0, false, errCreating
	}
	defer release()
	// the job that held the lock may have recorded it
	if id, err = c.cfg.Store.Posted(ctx, pr, c.key(head)); err != nil || id != 0 {
		return id, false, err
	}
	// a crash after creating and before recording: find it by name
	if id, err = gh.FindCheckRun(ctx, pr.Owner, pr.Repo, head, c.cfg.Name); err != nil {
		return 0, false, err
	}
	if id == 0 {
		r.Name, r.HeadSHA = c.cfg.Name, head
		if id, err = gh.CreateCheckRun(ctx, pr.Owner, pr.Repo, r); err != nil {
			return 0, false, err
		}
		created = true
	}
	return id, created, c.cfg.Store.SetPosted(ctx, pr, c.key(head), id)
}

// createLockTTL bounds how long a creator that died keeps others from
// creating the head's check run (a find and a create, each within
// Timeout, take less).
const createLockTTL = 30 * time.Second

func owner() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

const awaitPoll = 100 * time.Millisecond

// awaitCreation waits, outside the write lane, while another job creates
// the head's check run (at most createLockTTL); known is its id when the
// caller read it already.
func (c *Checks) awaitCreation(ctx context.Context, pr jobs.PR, head string, known int64) error {
	if known != 0 {
		return nil
	}
	for polls := 0; ; polls++ {
		if id, err := c.cfg.Store.Posted(ctx, pr, c.key(head)); err != nil || id != 0 {
			return err
		}
		release, ok, err := c.cfg.Store.Lock(ctx, pr, c.key(head)+":create", owner(), createLockTTL)
		if err != nil {
			return err
		}
		if ok { // nobody is creating it
			release()
			return nil
		}
		if polls >= int(createLockTTL/awaitPoll) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(awaitPoll):
		}
	}
}

// dropped logs what a fire-and-forget write could not do that is no
// GitHub failure of its own (those are counted and logged by failed).
func (c *Checks) dropped(ctx context.Context, pr jobs.PR, kind string, err error) {
	var ra *RetryAfterError
	if err == nil || errors.Is(err, errCreating) || errors.As(err, &ra) || errors.Is(err, context.Canceled) {
		return
	}
	c.cfg.Log.WarnContext(ctx, "could not write the check run", "pr", pr.String(), "kind", kind, "err", err)
}

// Queued shows a freshly planned head as queued; lane names the
// discounted lane its files go to (LaneFlex, LaneBatch; "" none), due
// when they come back at the latest (both said in the summary). Failures
// are counted and logged; nothing waits for it.
func (c *Checks) Queued(ctx context.Context, pr jobs.PR, head string, jobs int, lane string, due time.Time) {
	summary := fmt.Sprintf("%d file jobs planned.", jobs)
	title := "Waiting for the model"
	switch lane {
	case LaneFlex:
		summary += " " + flexNote
	case LaneBatch:
		summary += " " + fmt.Sprintf(batchNote, due.UTC().Format("2006-01-02 15:04 UTC"))
		title = "In the batch lane: due by " + due.UTC().Format("2006-01-02 15:04 UTC")
	}
	err := c.write(ctx, pr, head, DecorationCheckQueued, CheckWrite, false, func(ctx context.Context, gh CheckWriter, id int64) error {
		_, _, err := c.create(ctx, gh, pr, head, id, ghapp.CheckRun{Status: "queued", Title: title, Summary: summary})
		return err
	})
	c.dropped(ctx, pr, DecorationCheckQueued, err)
}

// flexNote is what a check run says of a head whose jobs go to the flex
// lane.
const flexNote = "This plan's files go to the flex lane: called at flex processing, at half price; answers come slower, and a file flex refuses is called at the standard tier."

// batchNote is what a check run says of a head whose jobs go to the
// batch lane (its due time).
const batchNote = "This plan's files go to the batch lane: sent in a batch at half price, answered by %s at the latest; a file its batch does not answer by then is called at the standard tier."

// Progress updates a head's check run (once Queued created it) with the
// files done, at most once per Every per pull request. Failures are counted and logged; nothing
// waits for it.
func (c *Checks) Progress(ctx context.Context, pr jobs.PR, head string) {
	// the pacing this process took itself stands until it ends: the files
	// it finishes meanwhile ask Redis nothing
	here, now := pr.String()+"|"+head, c.cfg.NowFunc()
	if until, ok := c.paced.Load(here); ok && now.Before(until.(time.Time)) {
		return
	}
	ok, err := c.cfg.Store.Throttle(ctx, pr, c.key(head), c.cfg.Every)
	if err != nil || !ok {
		c.dropped(ctx, pr, DecorationCheckProgress, err)
		return
	}
	c.pacedUntil(here, now.Add(c.cfg.Every))
	// only Queued creates the run in progress (so it starts queued);
	// without one (update: none recorded), Complete creates it completed
	err = c.write(ctx, pr, head, DecorationCheckProgress, CheckWrite, true, func(ctx context.Context, gh CheckWriter, id int64) error {
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
		done, total := run.FileSummaries()
		return gh.UpdateCheckRun(ctx, pr.Owner, pr.Repo, id, ghapp.CheckRun{Name: c.cfg.Name, HeadSHA: head, Status: "in_progress", Summary: progressText(run),
			Title: fmt.Sprintf("%d of %d files", done, total)})
	})
	c.dropped(ctx, pr, DecorationCheckProgress, err)
}

// pacedUntil keeps that this process paced key until until; every
// thousandth call drops the entries that ended.
func (c *Checks) pacedUntil(key string, until time.Time) {
	c.paced.Store(key, until)
	if c.pacedN.Add(1)%1000 != 0 {
		return
	}
	now := c.cfg.NowFunc()
	c.paced.Range(func(k, v any) bool {
		if !now.Before(v.(time.Time)) {
			c.paced.Delete(k)
		}
		return true
	})
}

// Superseded completes a replaced head's check run, if it has one, as
// cancelled: a push moved the review to head by, and a run left queued or
// in progress would show the old commit as under review for good (on
// GitLab, a commit status left pending or running). Failures are counted
// and logged; nothing waits for it.
func (c *Checks) Superseded(ctx context.Context, pr jobs.PR, head, by string) {
	r := ghapp.CheckRun{Name: c.cfg.Name, HeadSHA: head, Status: "completed", Conclusion: "cancelled", Title: "Superseded by " + short(by),
		Summary: "A newer commit (" + short(by) + ") is reviewed instead."}
	err := c.write(ctx, pr, head, DecorationCheckComplete, CheckWrite, true, func(ctx context.Context, gh CheckWriter, id int64) error {
		return gh.UpdateCheckRun(ctx, pr.Owner, pr.Repo, id, r)
	})
	c.dropped(ctx, pr, DecorationCheckComplete, err)
}

// QuotaWait shows that a head waits for its tenant's quota, spent for
// this period, to reset at until: the review is not skipped, it resumes
// then. Written once per head and reset time; failures are counted and
// logged; nothing waits for it.
func (c *Checks) QuotaWait(ctx context.Context, pr jobs.PR, head string, until time.Time) {
	at := until.UTC().Format("2006-01-02 15:04 UTC")
	c.waiting(ctx, pr, head, "quota", until.Unix(), "Waiting for the quota: resumes "+at, func(run store.Run) string {
		return "The installation's quota for this period is spent. Nothing is skipped: the review resumes by itself when the quota resets, at " +
			at + ". " + progressText(run)
	})
}

// waiting writes what a waiting head waits for: title, and the summary
// made of the run, as queued (no file done yet) or in progress. what
// and mark name the state shown: the same state is written once.
func (c *Checks) waiting(ctx context.Context, pr jobs.PR, head, what string, mark int64, title string, summary func(store.Run) string) {
	key := c.key(head) + ":" + what
	if shown, err := c.cfg.Store.Posted(ctx, pr, key); err != nil || shown == mark {
		c.dropped(ctx, pr, DecorationCheckWaiting, err)
		return
	}
	err := c.write(ctx, pr, head, DecorationCheckWaiting, CheckWrite, false, func(ctx context.Context, gh CheckWriter, known int64) error {
		run, err := c.cfg.Store.GetRun(ctx, pr)
		if err != nil || run.Head != head || run.State != store.StateRunning {
			return err
		}
		status := "queued"
		if run.SummaryDone+run.ReviewDone > 0 {
			status = "in_progress"
		}
		r := ghapp.CheckRun{Name: c.cfg.Name, HeadSHA: head, Status: status, Title: title, Summary: summary(run)}
		id, created, err := c.create(ctx, gh, pr, head, known, r)
		if err == nil && !created {
			err = gh.UpdateCheckRun(ctx, pr.Owner, pr.Repo, id, r)
		}
		if err != nil {
			return err
		}
		return c.cfg.Store.SetPosted(ctx, pr, key, mark)
	})
	c.dropped(ctx, pr, DecorationCheckWaiting, err)
}

func progressText(run store.Run) string {
	done, total := run.FileSummaries()
	s := fmt.Sprintf("Summarised %d of %d files.", done, total)
	if run.ReviewTotal > 0 {
		s += fmt.Sprintf(" Reviewed %d of %d file parts.", run.ReviewDone, run.ReviewTotal)
	}
	return s
}

// Complete finishes a head's check run with the review's outcome and a
// link to the summary comment; finalize calls it once the summary and
// review are posted and the run is marked done. It returns nil when the
// run is completed or given up, and a *RetryAfterError when it may be
// tried again later (finalize then retries it alone: its other writes
// are recorded and not repeated).
func (c *Checks) Complete(ctx context.Context, pr jobs.PR, head string, rows []render.File, comments int, summaryID int64) error {
	var reviewed, failed, quota int
	for _, r := range rows {
		if r.Reviewed {
			reviewed++
		}
		if r.Failed {
			failed++
		}
		if r.Quota {
			quota++
		}
	}
	conclusion, title := "success", render.Count(len(rows), "file")+" summarised"
	switch {
	case failed > 0:
		conclusion, title = "neutral", render.Count(failed, "file")+" could not be processed"
	case quota > 0:
		// skipped for a spent quota (quota.when_spent: skip): never green
		conclusion, title = "neutral", render.Count(quota, "file")+" skipped: the quota is spent"
	case comments > 0:
		conclusion, title = "neutral", render.Count(comments, "comment")+" on "+render.Count(reviewed, "reviewed file")
	case reviewed > 0:
		title = "No problems found in " + render.Count(reviewed, "file")
	}
	link := ""
	if summaryID > 0 {
		link = fmt.Sprintf("%s/%s/%s/pull/%d#issuecomment-%d", c.cfg.WebURL, pr.Owner, pr.Repo, pr.Number, summaryID)
		if pr.Forge() == jobs.ForgeGitLab {
			link = fmt.Sprintf("%s/%s/%s/-/merge_requests/%d#note_%d", strings.TrimRight(c.cfg.GitLabURL, "/"), pr.Owner, pr.Repo, pr.Number, summaryID)
		}
	}
	summary := title + "."
	if link != "" {
		summary += " See the summary comment: " + link
	}
	off, known, err := c.isOff(ctx, pr, head, DecorationCheckComplete)
	if err != nil || off {
		return err
	}
	// a queued or progress write creating the run now: wait for its id
	// here, not in the write lane
	if err := c.awaitCreation(ctx, pr, head, known); err != nil {
		return err
	}
	r := ghapp.CheckRun{Name: c.cfg.Name, HeadSHA: head, Status: "completed", Conclusion: conclusion, Title: title, Summary: summary, DetailsURL: link}
	err = c.write(ctx, pr, head, DecorationCheckComplete, PublishWrite, false, func(ctx context.Context, gh CheckWriter, known int64) error {
		id, created, err := c.create(ctx, gh, pr, head, known, r)
		if err != nil || created {
			return err
		}
		return gh.UpdateCheckRun(ctx, pr.Owner, pr.Repo, id, r)
	})
	if errors.Is(err, errCreating) {
		return &RetryAfterError{After: 2 * time.Second, Err: err} // its id is recorded in a moment
	}
	return err
}
