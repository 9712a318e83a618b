package workers

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/internal/render"
	"github.com/prq-dev/prq/internal/safemd"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// SummaryMarker begins the hidden marker of part 1 of prq's summary
// comment (the rest of each marker is a keyed tag; see render.Markers):
// tools and tests count summary comments by it.
const SummaryMarker = "<!-- prq:summary part=1 "

// MaxReviewComments caps the line comments of one review (very large
// reviews time out on GitHub); the rest are listed in the review body.
const MaxReviewComments = 60

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
	PostedEach(ctx context.Context, pr jobs.PR, whats ...string) ([]int64, error)
	SetPosted(ctx context.Context, pr jobs.PR, what string, id int64) error
	SetPostedEach(ctx context.Context, pr jobs.PR, whats []string, ids []int64) error
	MarkFinalized(ctx context.Context, pr jobs.PR, head string) error
	CarryResults(ctx context.Context, pr jobs.PR, head string, rs []store.Result) error
	PostedFindings(ctx context.Context, pr jobs.PR) (map[string]store.PostedFinding, error)
	AddPostedFindings(ctx context.Context, pr jobs.PR, fs map[string]store.PostedFinding) error
	ClosePostedFinding(ctx context.Context, pr jobs.PR, key string) error
	Lock(ctx context.Context, pr jobs.PR, what, owner string, ttl time.Duration) (release func(), ok bool, err error)
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
	// Markers make the keyed markers prq finds its writes by.
	Markers render.Markers
	// Checks, when set, completes the head's check run once its results
	// are published.
	Checks *Checks
	// Votes, when set, tracks the findings posted as line comments and
	// reads back the 👍 and 👎 people gave them at each later finalize
	// of the pull request (a *store.Store): the findings' acceptance
	// rate.
	Votes VoteStore
	// ShowCost writes what the head's calls cost (at the models' prices)
	// in its summary's footer.
	ShowCost bool
	// Attempts counts each job's runs for its retry budget. Required.
	Attempts Attempter
	// Budget bounds each job's retries, GitHub rate-limit waits included.
	// Defaults to DefaultBatchBudget.
	Budget RetryBudget
	// GaveUpFunc, when set, counts jobs that spent their retry budget, by
	// job kind and reason (prq_jobs_gave_up_total).
	GaveUpFunc func(kind, reason string)
	// NowFunc is the clock of the retry budget. Defaults to time.Now.
	NowFunc func() time.Time
	// Installs, when set, stops the work of an installation that was
	// uninstalled or suspended, or that GitHub refuses a token.
	Installs InstallState
	// LifecycleFunc, when set, counts jobs dropped for their installation
	// (prq_lifecycle_total, event job_skipped).
	LifecycleFunc func(event, reason string)
	// Log defaults to discarding.
	Log *slog.Logger
}

// Finalizer handles pr:finalize: it publishes a head's results, one
// summary comment (upserted by its marker) and one review with line
// comments. Both are recorded in the store and found again on GitHub by
// marker, so a retried or re-run finalize never posts twice.
type Finalizer struct {
	cfg    FinalizerConfig
	gate   installGate
	budget budgetOf
}

// NewFinalizer returns a Finalizer.
func NewFinalizer(cfg FinalizerConfig) (*Finalizer, error) {
	switch {
	case cfg.Results == nil || cfg.Publications == nil:
		return nil, errors.New("workers: finalizer: Results and Publications are required")
	case cfg.GitHub == nil:
		return nil, errors.New("workers: finalizer: GitHub is required")
	case cfg.Turns == nil:
		return nil, errors.New("workers: finalizer: Turns is required")
	case cfg.Attempts == nil:
		return nil, errors.New("workers: finalizer: Attempts is required")
	}
	budget, err := cfg.Budget.orDefault(DefaultBatchBudget, "finalizer: Budget")
	if err != nil {
		return nil, err
	}
	cfg.Budget = budget
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	cfg.Log = logOrDiscard(cfg.Log)
	return &Finalizer{cfg: cfg, gate: installGate{state: cfg.Installs, count: cfg.LifecycleFunc, log: cfg.Log}, budget: budgetOf{attempts: cfg.Attempts, budget: cfg.Budget, gaveUp: cfg.GaveUpFunc, now: cfg.NowFunc, log: cfg.Log}}, nil
}

// ProcessTask publishes one head's results. Its retries, GitHub's
// rate-limit waits included, stay within its budget.
func (p *Finalizer) ProcessTask(ctx context.Context, t *asynq.Task) error {
	var f jobs.Finalize
	if err := jobs.Unmarshal(t.Type(), t.Payload(), &f); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	return p.budget.runAt(ctx, "finalize", jobs.FinalizeTaskID(f), func(at attempt) error { return p.publish(ctx, f, at.spent()) })
}

// publish publishes the head's results, then completes its check run.
// The results come first and are recorded as they go: a retry (for the
// check run, or after any failure) repeats no write GitHub already
// holds. A check run that cannot be completed by the job's last attempt
// is left as it is: it never fails the job.
func (p *Finalizer) publish(ctx context.Context, f jobs.Finalize, last bool) error {
	cfg, log := &p.cfg, p.cfg.Log
	if err := p.gate.check(ctx, f.PR.Installation, "finalize"); err != nil {
		return err
	}
	// one publication of a pull request at a time: a finalize of a head
	// that was current when it began must not write after a newer head's
	// (it would put the older summary back)
	release, ok, err := cfg.Publications.Lock(ctx, f.PR, "publish", jobs.FinalizeTaskID(f), publishLockTTL)
	if err != nil {
		return err
	}
	if !ok {
		return &RetryAfterError{After: publishLockWait, Err: errors.New("another finalize of the pull request is publishing")}
	}
	defer release()
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
	if f.Run != 0 && f.Run != run.CreatedAt.UnixMilli() {
		// an earlier run of the head (reopened, reviewed again on
		// request): the current run publishes its own
		return fmt.Errorf("finalize of an earlier run of the head: %w", asynq.RevokeTask)
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
	// what this head takes from earlier reviewed heads, kept with it so
	// the next push carries it on
	if err := cfg.Publications.CarryResults(ctx, f.PR, f.HeadSHA, carried(files, results, prev)); err != nil {
		return err
	}
	sum, rows := summaryOf(run, files, results, prev)
	if cfg.ShowCost {
		for _, r := range results { // this head's own: carried and reused results cost it nothing
			sum.Cost += r.Cost
		}
	}
	sum.Marker = func(part int) string { return cfg.Markers.Summary(f.PR.Key(), part) }
	parts := sum.Parts(0)
	var summaryID int64
	for i, body := range parts {
		id, err := p.upsert(ctx, gh, f.PR, fmt.Sprintf("summary:%d", i+1), cfg.Markers.Summary(f.PR.Key(), i+1), body)
		if err != nil {
			return p.gate.refused(ctx, f.PR.Installation, ghFailed(ctx, log, f.PR, "summary comment", err))
		}
		if i == 0 {
			summaryID = id
		}
	}
	// parts a longer summary used before and this one does not
	before, err := cfg.Publications.Posted(ctx, f.PR, "summary_parts")
	if err != nil {
		return err
	}
	for k := len(parts) + 1; k <= int(before); k++ {
		marker := cfg.Markers.Summary(f.PR.Key(), k)
		if _, err := p.upsert(ctx, gh, f.PR, fmt.Sprintf("summary:%d", k), marker, "_This part of prq's summary is no longer used._\n\n"+marker+"\n"); err != nil {
			return p.gate.refused(ctx, f.PR.Installation, ghFailed(ctx, log, f.PR, "summary comment", err))
		}
	}
	if err := cfg.Publications.SetPosted(ctx, f.PR, "summary_parts", int64(len(parts))); err != nil {
		return err
	}
	comments := 0
	if run.ReviewTotal > 0 {
		// a head reviewed again on request (its round) gets a review of its own
		what := "review:" + f.HeadSHA + run.Round
		open, err := cfg.Publications.PostedFindings(ctx, f.PR)
		if err != nil {
			return err
		}
		if comments, err = p.postReview(ctx, gh, f, what, results, rows, open); err != nil {
			return p.gate.refused(ctx, f.PR.Installation, ghFailed(ctx, log, f.PR, "review", err))
		}
		if err := p.resolveFixed(ctx, gh, f, what, files, results, open); err != nil {
			return p.gate.refused(ctx, f.PR.Installation, ghFailed(ctx, log, f.PR, "resolving threads", err))
		}
		// last, once the results and the check run are out: what people
		// said of the earlier reviews' findings
		defer p.readVotes(ctx, gh, f.PR, what)
	}
	if err := cfg.Publications.MarkFinalized(ctx, f.PR, f.HeadSHA); err != nil {
		return err
	}
	log.InfoContext(ctx, "results published", "pr", f.PR.String(), "head", short(f.HeadSHA), "results", len(results), "summary_parts", len(parts))
	if cfg.Checks == nil {
		return nil
	}
	err = cfg.Checks.Complete(ctx, f.PR, f.HeadSHA, rows, comments, summaryID)
	if err != nil && last && ctx.Err() == nil {
		log.WarnContext(ctx, "the check run is left unfinished: the finalize job's retry budget is spent (its results are published)", "pr", f.PR.String(), "head", short(f.HeadSHA), "err", err)
		return nil
	}
	return p.gate.refused(ctx, f.PR.Installation, err)
}

// publishLockTTL bounds how long a crashed finalize keeps its pull
// request's publications waiting; publishLockWait is how long another
// waits before trying again (the retry budget's 20 attempts outlast the
// lock).
const (
	publishLockTTL  = 2 * time.Minute
	publishLockWait = 10 * time.Second
)

// upsert writes one comment found again by its marker, recording its id
// and a checksum of its body: a comment GitHub holds with this body
// already is not written again (a retry edits nothing).
func (p *Finalizer) upsert(ctx context.Context, gh ReviewWriter, pr jobs.PR, what, marker, body string) (int64, error) {
	v, err := p.cfg.Publications.PostedEach(ctx, pr, what, what+":sum")
	if err != nil {
		return 0, err
	}
	known, sum := v[0], bodySum(body)
	if known != 0 && v[1] == sum {
		return known, nil
	}
	var id int64
	err = p.cfg.Turns.Do(ctx, pr.Installation, PublishWrite, func() error {
		var err error
		id, err = gh.UpsertComment(ctx, pr.Owner, pr.Repo, pr.Number, known, marker, body)
		return err
	})
	if err != nil {
		return 0, err
	}
	// the id and its body's checksum in one write
	return id, p.cfg.Publications.SetPostedEach(ctx, pr, []string{what, what + ":sum"}, []int64{id, sum})
}

// bodySum is a comment body's checksum, as stored beside its id.
func bodySum(body string) int64 {
	h := fnv.New64a()
	h.Write([]byte(body))
	return int64(h.Sum64())
}

// postReview posts the head's one review, whatever it found: line
// comments (up to MaxReviewComments), findings that sit on no line in its
// body, and "no problems found" when there is nothing to say, so a clean
// review can be told from a missing one. A finding an earlier review of
// the pull request posted and that is still open is not posted again: the
// body counts it. It returns the comments made.
func (p *Finalizer) postReview(ctx context.Context, gh ReviewWriter, f jobs.Finalize, what string, results []store.Result, rows []render.File, open map[string]store.PostedFinding) (int, error) {
	pub := p.cfg.Publications
	lc := p.lineComments(f.PR, what, results, open)
	comments, findings := lc.comments, lc.findings
	if len(comments) > MaxReviewComments {
		for i := MaxReviewComments; i < len(comments); i++ {
			findings = append(findings, render.Finding{Path: comments[i].Path, Line: comments[i].Line, Body: lc.prose[i]})
		}
		comments = comments[:MaxReviewComments]
	}
	sort.SliceStable(findings, func(i, j int) bool { return findings[i].Path < findings[j].Path })
	if id, err := pub.Posted(ctx, f.PR, what); err != nil || id != 0 {
		return len(comments), err
	}
	reviewed, failed := 0, 0
	for _, r := range rows {
		if r.Reviewed {
			reviewed++
		}
	}
	failedPaths := map[string]bool{}
	for _, r := range results {
		if r.Kind == jobs.KindReview && r.Failed && !failedPaths[r.Path] {
			failedPaths[r.Path] = true
			failed++
		}
	}
	marker := p.cfg.Markers.Review(f.PR.Key(), strings.TrimPrefix(what, "review:"))
	repo := f.PR.Owner + "/" + f.PR.Repo
	var id int64
	err := p.cfg.Turns.Do(ctx, f.PR.Installation, PublishWrite, func() error {
		var err error
		// a crash after posting and before recording: find it by marker
		if id, err = gh.HasReview(ctx, f.PR.Owner, f.PR.Repo, f.PR.Number, marker); err != nil || id != 0 {
			return err
		}
		body := render.Review{Repo: repo, Head: f.HeadSHA, Files: reviewed, Failed: failed, Comments: len(comments), Findings: findings, Marker: marker, StillOpen: lc.stillOpen}.Body(0)
		id, err = gh.CreateReview(ctx, f.PR.Owner, f.PR.Repo, f.PR.Number, f.HeadSHA, body, comments)
		if errors.Is(err, ghapp.ErrUnprocessable) && len(comments) > 0 {
			// A line GitHub will not take: the review without line
			// comments, and the comments in its body.
			all := findings
			for i, c := range comments {
				all = append(all, render.Finding{Path: c.Path, Line: c.Line, Body: lc.prose[i]})
			}
			body = render.Review{Repo: repo, Head: f.HeadSHA, Files: reviewed, Failed: failed, Findings: all, Marker: marker, StillOpen: lc.stillOpen}.Body(0)
			id, err = gh.CreateReview(ctx, f.PR.Owner, f.PR.Repo, f.PR.Number, f.HeadSHA, body, nil)
			comments = nil
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	// the findings first: a crash between the two finds the review by
	// its marker and records nothing twice
	if err := p.track(ctx, f.PR, lc, len(comments)); err != nil {
		return 0, err
	}
	if err := pub.AddPostedFindings(ctx, f.PR, lc.posted); err != nil {
		return 0, err
	}
	return len(comments), pub.SetPosted(ctx, f.PR, what, id)
}

// lineComments are a head's findings as its review posts them.
type lineComments struct {
	comments []ghapp.ReviewComment
	// keys and tracked are each comment's finding key ("" for none) and
	// what its acceptance is counted under.
	keys    []string
	tracked []store.TrackedFinding
	// prose is each comment's text without its suggestion and marker,
	// for the review body when it cannot be a line comment.
	prose    []string
	findings []render.Finding // no line of the diff
	// posted are the findings posted (in comments or the body), by key;
	// stillOpen counts those left out as posted and open already.
	posted    map[string]store.PostedFinding
	stillOpen int
}

// lineComments gathers the head's findings, sorted by path and line,
// made inert, each with its suggestion (if any) and its finding's marker;
// a finding an earlier review posted (open holds it, from another review
// than what) is left out.
func (p *Finalizer) lineComments(pr jobs.PR, what string, results []store.Result, open map[string]store.PostedFinding) lineComments {
	now := p.cfg.NowFunc()
	out := lineComments{posted: map[string]store.PostedFinding{}}
	type made struct {
		store.Comment
		model string
	}
	var cs []made
	for _, r := range results {
		if r.Kind != jobs.KindReview {
			continue
		}
		for _, c := range r.Comments {
			if was, ok := open[c.Key]; ok && c.Key != "" && was.What != what {
				out.stillOpen++
				continue
			}
			cs = append(cs, made{c, r.Model})
		}
		for _, n := range r.Notes {
			out.findings = append(out.findings, render.Finding{Path: r.Path, Line: n.Line, Body: n.Body})
		}
	}
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].Path != cs[j].Path {
			return cs[i].Path < cs[j].Path
		}
		return cs[i].Line < cs[j].Line
	})
	repo := pr.Owner + "/" + pr.Repo
	for _, c := range cs {
		prose := safemd.Text(c.Body, repo)
		body := prose
		if c.Suggestion != nil {
			body = strings.TrimRight(body, "\n") + "\n\n" + render.Suggestion(*c.Suggestion)
		}
		if c.Key != "" {
			body = strings.TrimRight(body, "\n") + "\n\n" + p.cfg.Markers.Finding(pr.Key(), c.Key) + "\n"
			out.posted[c.Key] = store.PostedFinding{What: what, Path: c.Path, Lines: strings.Join(c.Lines, "\n")}
		}
		out.comments = append(out.comments, ghapp.ReviewComment{Path: c.Path, Line: c.Line, StartLine: c.StartLine, Side: c.Side, Body: body})
		out.prose = append(out.prose, prose)
		kind := store.FindingProse
		if c.Suggestion != nil {
			kind = store.FindingSuggestion
		}
		out.keys = append(out.keys, c.Key)
		out.tracked = append(out.tracked, store.TrackedFinding{Model: c.model, Kind: kind, Posted: now.Unix(), What: what})
	}
	return out
}

// summaryOf gathers a head's files for its summary comment: each file's
// summary (carried from the last reviewed head when this push left the
// file alone), its review parts merged, and why a file has none.
func summaryOf(run store.Run, files map[int]store.FileData, results, prev []store.Result) (render.Summary, []render.File) {
	summaries := map[string]store.Result{}
	reviews := map[string][]store.Result{}
	for _, r := range prev {
		if r.Kind == jobs.KindSummary && !r.Walkthrough {
			summaries[r.Path] = r
		}
	}
	for _, r := range results {
		if r.Walkthrough {
			continue // the pull request's, not a file's: it opens the summary
		}
		if r.Kind == jobs.KindSummary {
			summaries[r.Path] = r
		} else {
			reviews[r.Path] = append(reviews[r.Path], r)
		}
	}
	idx := make([]int, 0, len(files))
	for i := range files {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var rows []render.File
	quotaReset := ""
	for _, i := range idx {
		fd := files[i]
		s, summarised := summaries[fd.Path]
		row := render.File{Path: fd.Path, Summary: s.Text}
		var notes []string
		note := func(n string) {
			if n != "" {
				notes = append(notes, n)
			}
		}
		switch {
		case strings.HasPrefix(s.Skipped, store.QuotaSkipPrefix):
			row.Quota = true
			quotaReset = strings.TrimPrefix(s.Skipped, quotaSkip+", resets at ")
		case s.Failed:
			row.Failed = true
			note(s.Skipped)
		case summarised:
			note(s.Skipped) // partial, or why there is no text
		}
		byFallback := map[string][]string{} // model: what it made
		if summarised && s.Fallback != "" && s.Text != "" {
			byFallback[s.Fallback] = append(byFallback[s.Fallback], "summarised")
		}
		if fd.SkipReason != "" && (!summarised || len(reviews[fd.Path]) == 0) {
			note(fd.SkipReason)
		}
		if fd.SkipReason == "" && !summarised {
			// a run finalized past its bound: this file's job never ended
			row.Failed = true
			note("no result: its job was lost")
		}
		if rs := reviews[fd.Path]; len(rs) > 0 {
			row.Reviewed = true
			for _, r := range rs {
				row.Comments += len(r.Comments)
				if r.Fallback != "" && !r.Failed && r.Skipped == "" && !slices.Contains(byFallback[r.Fallback], "reviewed") {
					byFallback[r.Fallback] = append(byFallback[r.Fallback], "reviewed")
				}
				switch {
				case r.Failed:
					row.Failed = true
					note(r.Skipped)
				case strings.HasPrefix(r.Skipped, store.QuotaSkipPrefix):
					row.Quota = true
				case r.Skipped != "":
					note(r.Skipped)
				}
			}
			if rs[0].Parts > 1 {
				note(fmt.Sprintf("reviewed in %d parts", rs[0].Parts))
			}
			if row.Failed || row.Quota {
				row.Reviewed = false
			}
		}
		for _, m := range slices.Sorted(maps.Keys(byFallback)) {
			row.Fallback = true
			note(strings.Join(byFallback[m], " and ") + " by " + m + ", a fallback model")
		}
		row.Note = strings.Join(dedupe(notes), "; ")
		rows = append(rows, row)
	}
	reviewed := run.Head
	if run.LastReviewed != "" && run.LastReviewed != run.Head {
		reviewed = run.LastReviewed + "," + run.Head
	}
	return render.Summary{Repo: run.PR.Owner + "/" + run.PR.Repo, Head: run.Head, Files: rows, QuotaReset: quotaReset, Notice: run.ConfigNotice, Walkthrough: walkthroughOf(results),
		State: "<!-- prq:reviewed=" + reviewed + " -->"}, rows
}

// carried returns the summaries a head takes from the last reviewed
// head's (its own and those it carried): files of the head with no
// summary of their own.
func carried(files map[int]store.FileData, results, prev []store.Result) []store.Result {
	own := map[string]bool{}
	for _, r := range results {
		if r.Kind == jobs.KindSummary {
			own[r.Path] = true
		}
	}
	in := map[string]bool{}
	for _, fd := range files {
		in[fd.Path] = true
	}
	var out []store.Result
	for _, r := range prev {
		if r.Kind == jobs.KindSummary && in[r.Path] && !own[r.Path] {
			r.Cost = 0 // bought for the head it came from
			out = append(out, r)
			own[r.Path] = true
		}
	}
	return out
}

func dedupe(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
