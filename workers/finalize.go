package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// SummaryMarker marks prq's summary comment so it is upserted, never
// posted twice.
const SummaryMarker = "<!-- prq:summary -->"

func reviewMarker(head string) string { return "<!-- prq:review " + head + " -->" }

// RunResults reads a head's run, files and results (a *store.Store).
type RunResults interface {
	Current(ctx context.Context, pr jobs.PR, head string) (bool, error)
	GetRun(ctx context.Context, pr jobs.PR) (store.Run, error)
	Files(ctx context.Context, pr jobs.PR, head string) (map[int]store.FileData, error)
	Results(ctx context.Context, pr jobs.PR, head string) ([]store.Result, error)
}

// Publications records what was published, so nothing is posted twice
// (a *store.Store).
type Publications interface {
	Posted(ctx context.Context, pr jobs.PR, what string) (int64, error)
	SetPosted(ctx context.Context, pr jobs.PR, what string, id int64) error
	MarkFinalized(ctx context.Context, pr jobs.PR, head string) error
}

var (
	_ RunResults   = (*store.Store)(nil)
	_ Publications = (*store.Store)(nil)
)

// FinalizerConfig configures a Finalizer.
type FinalizerConfig struct {
	// Results and Publications read the head's results and record what
	// was published. Required.
	Results      RunResults
	Publications Publications
	// GitHub publishes. Required.
	GitHub ReviewWriters
	// Turns paces the writes among the installation's. Required.
	Turns Turns
	// Log defaults to discarding.
	Log *slog.Logger
}

// Finalizer handles pr:finalize: it publishes a head's results, one
// summary comment (upserted by its marker) and one review with line
// comments. Both are recorded in the store and found again on GitHub by
// marker, so a retried or re-run finalize never posts twice.
type Finalizer struct{ cfg FinalizerConfig }

// NewFinalizer returns a Finalizer.
func NewFinalizer(cfg FinalizerConfig) (*Finalizer, error) {
	switch {
	case cfg.Results == nil || cfg.Publications == nil:
		return nil, errors.New("workers: finalizer: Results and Publications are required")
	case cfg.GitHub == nil:
		return nil, errors.New("workers: finalizer: GitHub is required")
	case cfg.Turns == nil:
		return nil, errors.New("workers: finalizer: Turns is required")
	}
	cfg.Log = logOrDiscard(cfg.Log)
	return &Finalizer{cfg: cfg}, nil
}

// ProcessTask publishes one head's results.
func (p *Finalizer) ProcessTask(ctx context.Context, t *asynq.Task) error {
	cfg, log := &p.cfg, p.cfg.Log
	var f jobs.Finalize
	if err := jobs.Unmarshal(t.Type(), t.Payload(), &f); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	current, err := cfg.Results.Current(ctx, f.PR, f.HeadSHA)
	if err != nil {
		return err
	}
	if !current {
		return fmt.Errorf("finalize of a superseded head: %w", asynq.RevokeTask)
	}
	run, err := cfg.Results.GetRun(ctx, f.PR)
	if err != nil {
		return err
	}
	files, err := cfg.Results.Files(ctx, f.PR, f.HeadSHA)
	if err != nil {
		return err
	}
	results, err := cfg.Results.Results(ctx, f.PR, f.HeadSHA)
	if err != nil {
		return err
	}
	gh, err := cfg.GitHub.ReviewWriter(f.PR.Installation)
	if err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	var prev []store.Result
	if run.LastReviewed != "" && run.LastReviewed != f.HeadSHA {
		if prev, err = cfg.Results.Results(ctx, f.PR, run.LastReviewed); err != nil {
			// without them the summary would drop the files this push left alone
			return err
		}
	}
	body := summaryComment(run, files, results, prev)
	known, err := cfg.Publications.Posted(ctx, f.PR, "summary")
	if err != nil {
		return err
	}
	var id int64
	err = cfg.Turns.Do(ctx, f.PR.Installation, func() error {
		var err error
		id, err = gh.UpsertComment(ctx, f.PR.Owner, f.PR.Repo, f.PR.Number, known, SummaryMarker, body)
		return err
	})
	if err != nil {
		return ghFailed(ctx, log, f.PR, "summary comment", err)
	}
	if err := cfg.Publications.SetPosted(ctx, f.PR, "summary", id); err != nil {
		return err
	}
	if err := p.postReview(ctx, gh, f, results); err != nil {
		return ghFailed(ctx, log, f.PR, "review", err)
	}
	if err := cfg.Publications.MarkFinalized(ctx, f.PR, f.HeadSHA); err != nil {
		return err
	}
	log.InfoContext(ctx, "results published", "pr", f.PR.String(), "head", short(f.HeadSHA), "results", len(results))
	return nil
}

func (p *Finalizer) postReview(ctx context.Context, gh ReviewWriter, f jobs.Finalize, results []store.Result) error {
	pub := p.cfg.Publications
	what := "review:" + f.HeadSHA
	if id, err := pub.Posted(ctx, f.PR, what); err != nil || id != 0 {
		return err
	}
	var comments []ghapp.ReviewComment
	for _, r := range results {
		if r.Kind != jobs.KindReview {
			continue
		}
		for _, c := range r.Comments {
			comments = append(comments, ghapp.ReviewComment{Path: c.Path, Line: c.Line, StartLine: c.StartLine, Side: c.Side, Body: c.Body})
		}
	}
	if len(comments) == 0 {
		return pub.SetPosted(ctx, f.PR, what, -1) // nothing to say: no review
	}
	sort.Slice(comments, func(i, j int) bool {
		if comments[i].Path != comments[j].Path {
			return comments[i].Path < comments[j].Path
		}
		return comments[i].Line < comments[j].Line
	})
	marker := reviewMarker(f.HeadSHA)
	var id int64
	err := p.cfg.Turns.Do(ctx, f.PR.Installation, func() error {
		var err error
		// a crash after posting and before recording: find it by marker
		if id, err = gh.HasReview(ctx, f.PR.Owner, f.PR.Repo, f.PR.Number, marker); err != nil || id != 0 {
			return err
		}
		body := fmt.Sprintf("prq reviewed %d files at %s. %s", countKind(results, jobs.KindReview), short(f.HeadSHA), marker)
		id, err = gh.CreateReview(ctx, f.PR.Owner, f.PR.Repo, f.PR.Number, f.HeadSHA, body, comments)
		if errors.Is(err, ghapp.ErrUnprocessable) {
			// A line GitHub will not take: post the review without line
			// comments, and the comments in its body.
			var b strings.Builder
			fmt.Fprintf(&b, "prq reviewed %d files at %s. GitHub refused some line comments; here they are:\n\n", countKind(results, jobs.KindReview), short(f.HeadSHA))
			for _, c := range comments {
				fmt.Fprintf(&b, "- `%s` line %d: %s\n", c.Path, c.Line, c.Body)
			}
			b.WriteString(marker)
			id, err = gh.CreateReview(ctx, f.PR.Owner, f.PR.Repo, f.PR.Number, f.HeadSHA, b.String(), nil)
		}
		return err
	})
	if err != nil {
		return err
	}
	return pub.SetPosted(ctx, f.PR, what, id)
}

func countKind(rs []store.Result, k jobs.Kind) int {
	n := 0
	for _, r := range rs {
		if r.Kind == k {
			n++
		}
	}
	return n
}

// summaryComment renders the PR's summary comment.
func summaryComment(run store.Run, files map[int]store.FileData, results, prev []store.Result) string {
	var b strings.Builder
	b.WriteString("## prq summary\n\n")
	summaries := map[string]store.Result{}
	reviews := map[string]store.Result{}
	for _, r := range prev {
		if r.Kind == jobs.KindSummary {
			summaries[r.Path] = r
		}
	}
	for _, r := range results {
		if r.Kind == jobs.KindSummary {
			summaries[r.Path] = r
		} else {
			reviews[r.Path] = r
		}
	}
	idx := make([]int, 0, len(files))
	for i := range files {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var skipped, quota []string
	comments := 0
	b.WriteString("| File | Summary |\n|---|---|\n")
	for _, i := range idx {
		fd := files[i]
		s, ok := summaries[fd.Path]
		switch {
		case fd.SkipReason != "" && !ok:
			skipped = append(skipped, fmt.Sprintf("- `%s`: %s", fd.Path, fd.SkipReason))
			continue
		case s.Skipped != "" && strings.HasPrefix(s.Skipped, "skipped: quota"):
			quota = append(quota, fmt.Sprintf("- `%s`: %s", fd.Path, s.Skipped))
			continue
		case s.Text == "":
			reason := s.Skipped
			if reason == "" {
				reason = fd.SkipReason
			}
			skipped = append(skipped, fmt.Sprintf("- `%s`: %s", fd.Path, reason))
			continue
		}
		text := strings.ReplaceAll(strings.TrimSpace(s.Text), "\n", " ")
		text = strings.ReplaceAll(text, "|", "\\|")
		b.WriteString(fmt.Sprintf("| `%s` | %s |\n", fd.Path, text))
		comments += len(reviews[fd.Path].Comments)
	}
	if run.ReviewTotal > 0 {
		fmt.Fprintf(&b, "\nReview: %d line comments on %d files.\n", comments, run.ReviewTotal)
	}
	if len(skipped) > 0 {
		b.WriteString("\n<details><summary>Files not summarised</summary>\n\n" + strings.Join(skipped, "\n") + "\n</details>\n")
	}
	if len(quota) > 0 {
		b.WriteString("\n**Quota:** some files were skipped because this installation's token quota is used up.\n\n" + strings.Join(quota, "\n") + "\n")
	}
	reviewed := run.Head
	if run.LastReviewed != "" && run.LastReviewed != run.Head {
		reviewed = run.LastReviewed + "," + run.Head
	}
	fmt.Fprintf(&b, "\n%s\n<!-- prq:reviewed=%s -->\n", SummaryMarker, reviewed)
	return b.String()
}
