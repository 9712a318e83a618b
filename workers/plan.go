package workers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// plan turns a PR event into per-file jobs (no LLM): list the files,
// filter them, record the run, supersede the previous head's work, and
// submit summary and review jobs through admission.
func (w *Workers) plan(ctx context.Context, t *asynq.Task) error {
	var p jobs.Plan
	if err := jobs.Unmarshal(t.Type(), t.Payload(), &p); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	if err := p.PR.Validate(); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	gh, err := w.gh.Client(p.PR.Installation)
	if err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	pr, err := gh.PR(ctx, p.PR.Owner, p.PR.Repo, p.PR.Number)
	if errors.Is(err, ghapp.ErrNotFound) {
		w.log.InfoContext(ctx, "pull request is gone; nothing to plan", "pr", p.PR.String())
		return nil
	}
	if err != nil {
		return ghRetry(err)
	}
	switch {
	case pr.State != "open" || pr.Draft:
		w.log.InfoContext(ctx, "pull request is closed or a draft; skipped", "pr", p.PR.String())
		return nil
	case pr.HeadSHA != p.HeadSHA:
		w.log.InfoContext(ctx, "pull request moved on; a newer event plans it", "pr", p.PR.String(), "event_head", p.HeadSHA, "head", pr.HeadSHA)
		return nil
	case pr.AuthorIsBot && w.cfg.SkipBotPRs:
		w.log.InfoContext(ctx, "pull request opened by a bot; skipped", "pr", p.PR.String(), "author", pr.Author)
		return nil
	}
	files, err := gh.Files(ctx, p.PR.Owner, p.PR.Repo, p.PR.Number)
	if err != nil {
		return ghRetry(err)
	}
	prev, _ := w.store.GetRun(ctx, p.PR)
	// Incremental: on a new push, review only what changed since the
	// last reviewed commit.
	var changed map[string]bool
	if prev.LastReviewed != "" && prev.LastReviewed != p.HeadSHA && p.Action == "synchronize" {
		cmp, err := gh.Compare(ctx, p.PR.Owner, p.PR.Repo, prev.LastReviewed, p.HeadSHA)
		switch {
		case err == nil:
			changed = map[string]bool{}
			for _, f := range cmp {
				changed[f.Filename] = true
			}
		case errors.Is(err, ghapp.ErrNotFound): // force-push: review everything
		default:
			return ghRetry(err)
		}
	}
	tierSpec := w.cfg.Tiers[p.Tier]
	if plan, err := w.store.GetPlan(ctx, p.PR.Installation); err == nil && plan.Reason == "open_source_user" {
		tierSpec.Review = true // open-source plans include reviews whatever their tier
	}
	var data []store.FileData
	var summaries, reviews []jobs.File
	for i, f := range files {
		fd := store.FileData{Path: f.Filename, Status: f.Status, Additions: f.Additions, Deletions: f.Deletions, Index: i}
		if f.Patch != nil {
			fd.Patch = *f.Patch
		}
		switch g, ex := excluded(f.Filename, w.cfg.Exclude); {
		case f.Patch == nil:
			fd.SkipReason = "binary or too large for a patch"
		case f.Status == "removed":
			fd.SkipReason = "removed"
		case ex:
			fd.SkipReason = "excluded by " + g
		case changed != nil && !changed[f.Filename]:
			fd.SkipReason = "unchanged since " + short(prev.LastReviewed)
		}
		data = append(data, fd)
		if fd.SkipReason != "" {
			continue
		}
		summaries = append(summaries, jobs.File{PR: p.PR, HeadSHA: p.HeadSHA, Kind: jobs.KindSummary, Tier: p.Tier, Path: f.Filename, Index: i, Model: w.cfg.SummaryModel})
		if tierSpec.Review {
			reviews = append(reviews, jobs.File{PR: p.PR, HeadSHA: p.HeadSHA, Kind: jobs.KindReview, Tier: p.Tier, Path: f.Filename, Index: i, Model: w.cfg.ReviewModel})
		}
	}
	run := store.Run{PR: p.PR, Head: p.HeadSHA, Base: pr.BaseSHA, Tier: p.Tier, SummaryTotal: len(summaries), ReviewTotal: len(reviews)}
	previous, started, err := w.store.StartRun(ctx, run, data)
	if err != nil {
		return err
	}
	if !started {
		// planned already (a retried plan): make sure its jobs exist
		ids, err := w.store.TaskIDs(ctx, p.PR, p.HeadSHA)
		if err != nil || len(ids) > 0 || len(summaries)+len(reviews) == 0 {
			return err
		}
	}
	if previous != "" {
		w.supersede(ctx, p.PR, previous)
	}
	cur, err := w.store.GetRun(ctx, p.PR)
	if err != nil {
		return err
	}
	seq := cur.CreatedAt.UnixMilli()
	var ids []string
	submit := func(list []jobs.File, typ string) error {
		for k := range list {
			f := &list[k]
			f.Total, f.PRSeq, f.Created = len(list), seq, time.Now().UnixMilli()
			fd := data[f.Index]
			pm, err := buildFilePrompt(f.Kind, pr.Title, fd, w.cfg.Models[f.Model], w.tok[f.Model])
			if err != nil {
				// the job records why it could not run; estimate little
				pm.estimate = 1
			}
			f.Estimate = pm.estimate
			f.Index = k
			ticket := fileTicket(*f)
			ids = append(ids, ticket.ID)
			payload := jobs.Marshal(fileRef{File: *f, FileIndex: fd.Index})
			if _, err := w.sched.Submit(ctx, asynq.NewTask(typ, payload), ticket, asynq.MaxRetry(8), asynq.Timeout(10*time.Minute)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := submit(summaries, jobs.TypeSummary); err != nil {
		return err
	}
	if err := submit(reviews, jobs.TypeReview); err != nil {
		return err
	}
	if err := w.store.SetTaskIDs(ctx, p.PR, p.HeadSHA, ids); err != nil {
		return err
	}
	w.log.InfoContext(ctx, "pull request planned", "pr", p.PR.String(), "head", short(p.HeadSHA), "tier", p.Tier,
		"files", len(files), "summaries", len(summaries), "reviews", len(reviews), "superseded", short(previous))
	if len(summaries)+len(reviews) == 0 {
		return w.enqueueFinalize(ctx, jobs.Finalize{PR: p.PR, HeadSHA: p.HeadSHA, Tier: p.Tier})
	}
	return nil
}

// fileRef is a per-file job's payload: the job and the file's index in
// the plan's stored files (Index in jobs.File is the job's position among
// its kind, which orders admission).
type fileRef struct {
	jobs.File
	FileIndex int `json:"file_index"`
}

// supersede drops a replaced head's waiting work: tickets out of
// admission, held tasks deleted. A stale job that still starts exits
// without effects (the store says its head is not current).
func (w *Workers) supersede(ctx context.Context, pr jobs.PR, head string) {
	ids, err := w.store.TaskIDs(ctx, pr, head)
	if err != nil {
		w.log.WarnContext(ctx, "could not list superseded jobs", "pr", pr.String(), "err", err)
		return
	}
	dropped := 0
	for _, id := range ids {
		for _, model := range w.sched.Models() {
			if ok, _ := w.sched.Cancel(ctx, model, id); ok {
				dropped++
			}
		}
		for _, q := range []string{jobs.QueuePaid, jobs.QueueTrial, jobs.QueueFree} {
			w.sched.DeleteTask(q, id)
		}
	}
	w.log.InfoContext(ctx, "superseded work dropped", "pr", pr.String(), "head", short(head), "tickets", dropped, "jobs", len(ids))
}

// Cancel drops a PR's pending work (closed, or turned draft).
func (w *Workers) Cancel(ctx context.Context, pr jobs.PR) error {
	head, err := w.store.Cancel(ctx, pr)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	w.supersede(ctx, pr, head)
	return nil
}

func (w *Workers) enqueueFinalize(ctx context.Context, f jobs.Finalize) error {
	_, err := w.client.EnqueueContext(ctx, asynq.NewTask(jobs.TypeFinalize, jobs.Marshal(f)),
		asynq.TaskID(jobs.FinalizeTaskID(f)), asynq.Queue(f.Tier.Queue()), asynq.MaxRetry(20), asynq.Timeout(5*time.Minute))
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return nil
	}
	return err
}

// ghRetry turns GitHub failures into asynq outcomes: rate limits wait as
// told (not a failure), others retry with backoff.
func ghRetry(err error) error {
	var rl *ghapp.RateLimitedError
	if errors.As(err, &rl) {
		return &RetryAfterError{After: rl.RetryAfter, Err: err}
	}
	return err
}

func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}
