package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/diff"
	"github.com/prq-dev/prq/internal/review"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
)

// FileStore reads a planned file and records its result (a *store.Store).
type FileStore interface {
	Current(ctx context.Context, pr jobs.PR, head string) (bool, error)
	GetRun(ctx context.Context, pr jobs.PR) (store.Run, error)
	FileAndContext(ctx context.Context, pr jobs.PR, head string, index int) (store.FileData, string, error)
	CompleteFile(ctx context.Context, pr jobs.PR, head string, r store.Result) (last bool, err error)
	HasResult(ctx context.Context, pr jobs.PR, head string, kind jobs.Kind, index int) (bool, error)
	SetWaiting(ctx context.Context, pr jobs.PR, head string, until time.Time) error
}

var _ FileStore = (*store.Store)(nil)

// FileWorkerConfig configures a FileWorker.
type FileWorkerConfig struct {
	// Store reads the file and records its result. Required.
	Store FileStore
	// Reuse, when set, keeps each prompt's result, so a job whose prompt
	// was answered already (the same file, context and model, for
	// another head or run) reuses it instead of paying again (a
	// *store.Store).
	Reuse ReuseStore
	// ReusedFunc, when set, counts results reused instead of bought
	// (prq_llm_reused_total{model,kind}).
	ReusedFunc func(model, kind string)
	// Ledger records the job's start and settles a job that makes no
	// call. Required.
	Ledger Ledger
	// Caller makes the LLM call. Required.
	Caller *Caller
	// Queue enqueues finalize after the head's last file. Required.
	Queue TaskQueue
	// Models are the configured models (the jobs name theirs).
	Models map[string]Model
	// Repairs keep an unreadable review reply for its one repair attempt,
	// and Requeue sends that attempt back through admission. Required.
	Repairs Drafts
	Requeue Requeue
	// UnusableFunc, when set, counts replies that could not be read, by
	// model and job kind (prq_llm_unusable_replies_total).
	UnusableFunc func(model, kind string)
	// IgnoredFunc, when set, counts the fields of a readable reply that
	// prq ignored, by model and job kind
	// (prq_llm_reply_ignored_fields_total).
	IgnoredFunc func(model, kind string, fields []string)
	// Attempts counts each job's runs for its retry budget. Required.
	Attempts Attempter
	// Budget bounds each job's retries. Defaults to DefaultBatchBudget.
	Budget RetryBudget
	// GaveUpFunc, when set, counts jobs that spent their retry budget, by
	// job kind and reason (prq_jobs_gave_up_total).
	GaveUpFunc func(kind, reason string)
	// FallbackFunc, when set, counts jobs that moved to a fallback model,
	// by model and reason (prq_jobs_fallbacks_total).
	FallbackFunc func(from, to, reason string)
	// Paused, when set, is told that a call paused its model and the job
	// moved to a fallback (FallbackMover.Kick: the jobs waiting for the
	// model move at once, not at the mover's next pass).
	Paused func()
	// NowFunc is the clock of the retry budget. Defaults to time.Now.
	NowFunc func() time.Time
	// Progress, when set, is told when a file of a head is done (the
	// check run's "n of m files"); its failures are its own.
	Progress func(ctx context.Context, pr jobs.PR, head string)
	// QuotaWait, when set, is told when a job of a head waits for its
	// tenant's quota to reset at until (the check run says so); its
	// failures are its own.
	QuotaWait func(ctx context.Context, pr jobs.PR, head string, until time.Time)
	// Installs, when set, stops the work of an installation that was
	// uninstalled or suspended, or that GitHub refuses a token.
	Installs InstallState
	// LifecycleFunc, when set, counts jobs dropped for their installation
	// (prq_lifecycle_total, event job_skipped).
	LifecycleFunc func(event, reason string)
	// Batch, when set, is the batch lane: the jobs of a tier with
	// TierSpec.Batch on a model with Model.Batch are handed to it.
	Batch *BatchLane
	// Tickets holds a job of the batch lane again, with its ticket, when
	// its batch did not answer it (the standard lane). Required with
	// Batch.
	Tickets Tickets
	// Log defaults to discarding.
	Log *slog.Logger
}

// FileWorker handles file:summary and file:review: it summarises or
// reviews one file of a PR.
type FileWorker struct {
	cfg  FileWorkerConfig
	gate installGate
	tok  map[string]*ratelimit.Tokenizer
}

// NewFileWorker returns a FileWorker.
func NewFileWorker(cfg FileWorkerConfig) (*FileWorker, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("workers: file worker: Store is required")
	case cfg.Ledger == nil:
		return nil, errors.New("workers: file worker: Ledger is required")
	case cfg.Caller == nil:
		return nil, errors.New("workers: file worker: Caller is required")
	case cfg.Queue == nil:
		return nil, errors.New("workers: file worker: Queue is required")
	case cfg.Repairs == nil || cfg.Requeue == nil:
		return nil, errors.New("workers: file worker: Repairs and Requeue are required")
	case cfg.Attempts == nil:
		return nil, errors.New("workers: file worker: Attempts is required")
	case cfg.Batch != nil && cfg.Tickets == nil:
		return nil, errors.New("workers: file worker: Tickets is required with Batch")
	}
	budget, err := cfg.Budget.orDefault(DefaultBatchBudget, "file worker: Budget")
	if err != nil {
		return nil, err
	}
	cfg.Budget = budget
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	ms, err := models(cfg.Models)
	if err != nil {
		return nil, err
	}
	cfg.Models = ms
	tok, err := tokenizers(ms)
	if err != nil {
		return nil, err
	}
	cfg.Log = logOrDiscard(cfg.Log)
	return &FileWorker{cfg: cfg, tok: tok, gate: installGate{state: cfg.Installs, count: cfg.LifecycleFunc, log: cfg.Log}}, nil
}

// ProcessTask runs one admitted file job. Whatever happens, it records a
// result (or a reason it has none) exactly once, and the last file of the
// head triggers finalize.
func (w *FileWorker) ProcessTask(ctx context.Context, t *asynq.Task) error {
	cfg, log := &w.cfg, w.cfg.Log
	var ref fileRef
	if err := jobs.Unmarshal(t.Type(), t.Payload(), &ref); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	f := ref.File
	// a job that moved to a fallback model was admitted under it
	origin := f.Model
	var mv Move
	flex := cfg.Caller.flexFor(f.Tier, cfg.Models[origin])
	batch := w.batchFor(f.Tier, cfg.Models[origin])
	if len(cfg.Models[origin].Fallbacks) > 0 || flex || batch {
		var err error
		if mv, err = cfg.Attempts.Moved(ctx, jobs.FileTaskID(f)); err != nil {
			return err
		}
		if mv.Model != "" {
			f.Model = mv.Model
		}
	}
	ticket := fileTicket(f)
	if mv.Model != "" {
		ticket.Tokens, ticket.Output = mv.Tokens, splitOf(mv.Tokens, mv.Output)
	}
	// a job of the batch lane is not admitted: it hands its request to
	// the lane, and its result run brings the answer back
	inBatch := batch && !mv.Standard && mv.Model == ""
	if !inBatch {
		started(ctx, cfg.Ledger, log, ticket)
	}
	if err := w.gate.check(ctx, f.PR.Installation, string(f.Kind)); err != nil {
		settle(ctx, cfg.Ledger, log, ticket, ratelimit.Cost{}) // no call: all refunded
		w.leftover(ctx, inBatch, f, ticket, true)
		return err
	}
	current, err := cfg.Store.Current(ctx, f.PR, f.HeadSHA)
	if err != nil {
		return err
	}
	if !current {
		settle(ctx, cfg.Ledger, log, ticket, ratelimit.Cost{}) // no call: all refunded
		w.leftover(ctx, inBatch, f, ticket, true)
		return fmt.Errorf("stale job of a superseded head: %w", asynq.RevokeTask)
	}
	if done, err := cfg.Store.HasResult(ctx, f.PR, f.HeadSHA, f.Kind, f.Index); err != nil {
		return err
	} else if done {
		// a retry after the result was recorded (finalize's enqueue
		// failed, or a crash came between): no second call; finalize
		// when the head is all done
		settle(ctx, cfg.Ledger, log, ticket, ratelimit.Cost{})
		w.leftover(ctx, inBatch, f, ticket, false) // booked by the run that recorded it
		run, err := cfg.Store.GetRun(ctx, f.PR)
		if err != nil {
			return err
		}
		if run.Head == f.HeadSHA && run.State == store.StateRunning && run.AllDone() {
			return enqueueFinalize(ctx, cfg.Queue, jobs.Finalize{PR: f.PR, HeadSHA: f.HeadSHA, Tier: f.Tier, Run: f.PRSeq})
		}
		return nil
	}
	at, err := budgeted(ctx, cfg.Attempts, ticket.ID, f.Created, cfg.Budget, cfg.NowFunc())
	if err != nil {
		return err
	}
	fd, shared, err := cfg.Store.FileAndContext(ctx, f.PR, f.HeadSHA, ref.FileIndex)
	if err != nil {
		return err
	}
	res := store.Result{Kind: f.Kind, Path: fd.Path, Index: f.Index, Run: f.PRSeq}
	m, ok := cfg.Models[f.Model]
	if !ok {
		settle(ctx, cfg.Ledger, log, ticket, ratelimit.Cost{}) // no call: all refunded
		res.Skipped = "model " + f.Model + " is not configured"
		return w.complete(ctx, f, res)
	}
	run, err := cfg.Store.GetRun(ctx, f.PR)
	if err != nil {
		return err
	}
	if run.Head != f.HeadSHA || run.State == store.StateCancelled {
		// superseded since the check above: the run's title and body are
		// another head's now
		settle(ctx, cfg.Ledger, log, ticket, ratelimit.Cost{}) // no call: all refunded
		w.leftover(ctx, inBatch, f, ticket, true)
		return fmt.Errorf("stale job of a superseded head: %w", asynq.RevokeTask)
	}
	title := run.Title
	if title == "" {
		title = f.PR.String()
	}
	build := func(m Model) (prompt, error) {
		return buildMovedPrompt(f.Kind, contextOf(title, run.Body).withRepo(run.Instructions, run.Language).withShared(shared), fd, cfg.Models[origin], w.tok[origin], m, w.tok[m.Name], f.Part)
	}
	pm, perr := build(m)
	pm.cacheKey = cacheKeyOf(f.PR)
	if perr != nil {
		settle(ctx, cfg.Ledger, log, ticket, ratelimit.Cost{}) // no call: all refunded
		if f.Model != origin && errors.Is(perr, errTooLarge) {
			return w.outgrown(ctx, f, fileTicket(ref.File), ticket, build, perr)
		}
		res.Skipped = "too large for " + f.Model
		var ce *ratelimit.CostError
		if errors.As(perr, &ce) {
			res.Skipped += fmt.Sprintf("'s rate limits (its call needs %d %s; one call may take %d)", ce.Cost, ce.Dimension, ce.Burst)
		}
		if !errors.Is(perr, errTooLarge) {
			res.Skipped, res.Failed = "the patch could not be read", true
			log.WarnContext(ctx, "patch could not be read", "pr", f.PR.String(), "path", fd.Path, "err", perr)
		}
		return w.complete(ctx, f, res)
	}
	res.Part, res.Parts = f.Part, f.Parts
	if f.Model != origin {
		res.Fallback = f.Model
		if pm.estimate > ticket.Tokens {
			// moved under its first model's estimate (FallbackMover):
			// admitted again under this model's own, so its bucket is
			// charged no less than the call takes
			settle(ctx, cfg.Ledger, log, ticket, ratelimit.Cost{}) // no call: all refunded
			ticket.Tokens, ticket.Output = pm.estimate, pm.output
			if err := cfg.Attempts.SetMoved(ctx, ticket.ID, Move{Model: f.Model, Tokens: pm.estimate, Output: pm.output}, moveKeep(cfg.Budget)); err != nil {
				return err
			}
			return backToAdmission(ctx, cfg.Requeue, ticket, 0, errors.New("estimate of the fallback model is larger than the one the job was moved with"))
		}
	}
	// A repair attempt: the unreadable reply and what was wrong with it
	// follow the prompt.
	repairKey := "repair:" + ticket.ID
	var repair struct{ Reply, Err string }
	if f.Kind == jobs.KindReview {
		if raw, err := cfg.Repairs.Draft(ctx, f.PR, repairKey); err != nil {
			return err
		} else if raw != "" && json.Unmarshal([]byte(raw), &repair) != nil {
			repair.Reply = ""
		}
	}
	// Never pay twice for the same work: a prompt answered already (for
	// a head this one replaced, a run reopened) is reused; one being
	// answered by another job now is waited for, a few times.
	var reuse string
	if cfg.Reuse != nil && repair.Reply == "" {
		reuse = promptKey(f, m, pm)
	}
	// a review asked for again ("full review", its round) buys new work
	if reuse != "" && run.Round == "" {
		if r, ok, err := cfg.Reuse.Reusable(ctx, reuse); err != nil {
			return err
		} else if ok {
			settle(ctx, cfg.Ledger, log, ticket, ratelimit.Cost{}) // no call: all refunded
			w.leftover(ctx, inBatch, f, ticket, true)
			r.Kind, r.Path, r.Index, r.Run, r.Part, r.Parts, r.Fallback = res.Kind, res.Path, res.Index, res.Run, res.Part, res.Parts, res.Fallback
			r.Cost = 0 // nothing bought for it
			for i := range r.Comments {
				r.Comments[i].Path = fd.Path
			}
			if cfg.ReusedFunc != nil {
				cfg.ReusedFunc(f.Model, string(f.Kind))
			}
			log.DebugContext(ctx, "result reused: the same prompt was answered already", "pr", f.PR.String(), "path", fd.Path, "kind", f.Kind)
			return w.complete(ctx, f, r)
		}
		mine := true
		if !inBatch { // a batch's twin is not waited for: it may take hours
			if mine, err = cfg.Reuse.ClaimReuse(ctx, reuse, ticket.ID); err != nil {
				return err
			}
		}
		if !mine {
			n, err := cfg.Attempts.ReuseWait(ctx, ticket.ID, moveKeep(cfg.Budget))
			if err != nil {
				return err
			}
			if n <= maxReuseWaits {
				settle(ctx, cfg.Ledger, log, ticket, ratelimit.Cost{}) // no call: all refunded
				wait := reuseWait
				if !mv.Standard && cfg.Caller.flexFor(f.Tier, m) {
					wait = reuseWaitFlex // its twin is as slow
				}
				return backToAdmission(ctx, cfg.Requeue, ticket, wait, errTwinInFlight)
			}
		}
	}
	if repair.Reply != "" {
		pm.turns = review.RepairTurns(repair.Reply, errors.New(repair.Err))
		if err := pm.measure(m, w.tok[f.Model]); err != nil {
			return err
		}
	}
	next := after(cfg.Models, origin, f.Model)
	spec := callSpec{ticket: ticket, kind: f.Kind, tier: f.Tier, inst: f.PR.Installation, prompt: pm, model: m, retried: retried(ctx), maxRetry: maxRetry(ctx), attempt: at, fallback: len(next) > 0,
		flex: !mv.Standard && cfg.Caller.flexFor(f.Tier, m)}
	var out llm.Response
	if inBatch {
		spec.lane, spec.fallback = LaneBatch, false
		out, err = w.viaBatch(ctx, t, f, spec)
		if errors.Is(err, errHanded) {
			return nil // its result run records it
		}
	} else {
		out, err = cfg.Caller.call(ctx, spec)
	}
	if err != nil {
		var sl *standardLaneError
		if errors.As(err, &sl) {
			return w.toStandard(ctx, t, f, ticket, sl.err)
		}
		var skip *skipError
		var wait *quotaWaitError
		var fb *fallbackError
		var fr *flexRefusedError
		if errors.As(err, &fr) {
			// the standard lane from now on: it waits its turn again
			if serr := cfg.Attempts.SetStandard(ctx, ticket.ID, moveKeep(cfg.Budget)); serr != nil {
				return fmt.Errorf("%w (and recording the standard lane failed: %v)", fr.err, serr)
			}
			log.InfoContext(ctx, "flex processing refused the call: back to admission for the standard lane", "pr", f.PR.String(), "task", ticket.ID, "model", f.Model, "err", fr.err)
			return backToAdmission(ctx, cfg.Requeue, ticket, 0, fr.err)
		}
		if errors.As(err, &fb) {
			moved, merr := w.fallBack(ctx, f, ticket, next, fb, build)
			if moved {
				return merr
			}
			err = fb.otherwise() // no fallback can take it
		}
		if errors.As(err, &wait) {
			return w.waitForQuota(ctx, f, ticket, wait.until)
		}
		if errors.As(err, &skip) {
			res.Skipped, res.Failed = skip.reason, skip.failed
			if skip.gaveUp != "" && cfg.GaveUpFunc != nil {
				cfg.GaveUpFunc(string(f.Kind), skip.gaveUp)
			}
			return w.complete(ctx, f, res)
		}
		return err
	}
	res.Tokens = out.PromptTokens + out.OutputTokens
	res.Cost = m.Prices.Of(out).Cost(out)
	if pm.truncated > 0 {
		res.Skipped = fmt.Sprintf("partial: %d hunks did not fit the model", pm.truncated)
	}
	if f.Kind != jobs.KindReview {
		res.Text = out.Text
		w.keep(ctx, reuse, res)
		return w.complete(ctx, f, res)
	}
	reply, perr := review.Parse(out.Text)
	if perr != nil {
		if cfg.UnusableFunc != nil {
			cfg.UnusableFunc(f.Model, string(f.Kind))
		}
		if repair.Reply == "" {
			// One repair attempt, through admission like any call.
			b, _ := json.Marshal(struct{ Reply, Err string }{out.Text, perr.Error()})
			if err := cfg.Repairs.SetDraft(ctx, f.PR, repairKey, string(b)); err != nil {
				return err
			}
			pm.turns = review.RepairTurns(out.Text, perr)
			if err := pm.measure(m, w.tok[f.Model]); err == nil {
				ticket.Tokens = pm.estimate
			}
			log.WarnContext(ctx, "review reply unusable; asking the model once more", "pr", f.PR.String(), "path", fd.Path, "model", f.Model, "err", perr)
			if inBatch {
				// the repair is a call of its own, in the standard lane
				return w.toStandard(ctx, t, f, ticket, perr)
			}
			return backToAdmission(ctx, cfg.Requeue, ticket, 0, perr)
		}
		log.WarnContext(ctx, "review reply unusable after a repair attempt; the file is shown as failed", "pr", f.PR.String(), "path", fd.Path, "model", f.Model, "err", perr)
		res.Skipped, res.Failed = "review failed: the model's reply could not be read", true
		return w.complete(ctx, f, res)
	}
	if len(reply.Ignored) > 0 {
		if cfg.IgnoredFunc != nil {
			cfg.IgnoredFunc(f.Model, string(f.Kind), reply.Ignored)
		}
		log.DebugContext(ctx, "review reply carried fields prq does not use", "model", f.Model, "fields", reply.Ignored)
	}
	placeFindings(&res, fd.Path, reply, pm.patch)
	w.keep(ctx, reuse, res)
	return w.complete(ctx, f, res)
}

// placeFindings records a file's review in res: its summary, its
// findings placed on the diff, each with its identity (review.Key) and
// its checked suggestion, and the findings on no line of the diff.
func placeFindings(res *store.Result, path string, reply review.Reply, patch *diff.Patch) {
	res.Text = reply.Summary
	comments, notes := review.Place(reply, patch)
	for _, c := range comments {
		res.Comments = append(res.Comments, store.Comment{Path: path, Line: c.Line, StartLine: c.StartLine, Side: string(c.Side), Body: c.Body,
			Key: review.Key(path, c.Side, c.Lines, c.Body), Lines: c.Lines, Suggestion: c.Suggestion})
	}
	for _, n := range notes {
		res.Notes = append(res.Notes, store.Note{Line: n.Line, Body: n.Body})
	}
}

// waitForQuota sends a job whose tenant's quota is spent back to
// admission for when the quota resets (and a second, for clocks that
// differ a little): the head waits instead of being skipped, its run's
// life bound and the job's retry budget count from the reset, and the
// check run says when work resumes.
func (w *FileWorker) waitForQuota(ctx context.Context, f jobs.File, ticket admission.Ticket, until time.Time) error {
	cfg := &w.cfg
	if err := cfg.Store.SetWaiting(ctx, f.PR, f.HeadSHA, until); err != nil {
		return err
	}
	if err := cfg.Attempts.Rebase(ctx, ticket.ID, until, 2*cfg.Budget.MaxAge+time.Hour+max(until.Sub(cfg.NowFunc()), 0)); err != nil {
		return err
	}
	if cfg.QuotaWait != nil {
		cfg.QuotaWait(ctx, f.PR, f.HeadSHA, until)
	}
	cfg.Log.InfoContext(ctx, "the tenant's quota is spent: the job waits for its reset", "pr", f.PR.String(), "task", ticket.ID, "until", until.UTC())
	at := until.Add(time.Second)
	if err := cfg.Requeue.RegisterAt(ctx, ticket, at); err != nil {
		return fmt.Errorf("waiting for the quota to reset (and re-registering failed: %v)", err)
	}
	return fmt.Errorf("%w: the tenant's quota is spent until %s", errBackToAdmission, until.UTC().Format(time.RFC3339))
}

// fallBack moves a job whose call failed (fb) to the first of next not
// paused whose prompt can be built, through admission: the move is recorded, then the
// ticket registered under the new model with its own estimate; moved
// says it was (err, then, is what the handler returns). A job no
// fallback can take is not moved: it ends as it would have without.
func (w *FileWorker) fallBack(ctx context.Context, f jobs.File, ticket admission.Ticket, next []string, fb *fallbackError, build func(Model) (prompt, error)) (moved bool, err error) {
	cfg := &w.cfg
	var paused map[string]string
	if pr, ok := cfg.Requeue.(interface {
		Paused(context.Context) map[string]string
	}); ok {
		paused = pr.Paused(ctx)
	}
	for _, to := range next {
		m, ok := cfg.Models[to]
		if !ok {
			continue
		}
		if _, p := paused[to]; p {
			continue // it serves nobody either
		}
		pm, err := build(m)
		if err != nil {
			continue // too large for it: the next
		}
		if err := cfg.Attempts.SetMoved(ctx, ticket.ID, Move{Model: to, Tokens: pm.estimate, Output: pm.output}, moveKeep(cfg.Budget)); err != nil {
			return true, fmt.Errorf("%w (and moving to fallback %s failed: %v)", fb.err, to, err)
		}
		from := ticket.Model
		ticket.Model, ticket.Tokens, ticket.Output = to, pm.estimate, pm.output
		if _, err := cfg.Requeue.Register(ctx, ticket); err != nil {
			// the reconciler registers it under the recorded model
			return true, fmt.Errorf("%w (and registering under fallback %s failed: %v)", fb.err, to, err)
		}
		w.fellBack(ctx, f, from, to, fb.reason, fb.err)
		if fb.reason == FallbackPaused && cfg.Paused != nil {
			cfg.Paused()
		}
		return true, fmt.Errorf("%w: moved to fallback model %s: %v", errBackToAdmission, to, fb.err)
	}
	return false, nil
}

// outgrown moves on a job whose fallback is too small for its file
// (FallbackMover moved it by its estimate, before its prompt was built):
// to the next fallback that can take it, else back to the model it was
// planned for (planned), to stay there (the mover leaves it).
func (w *FileWorker) outgrown(ctx context.Context, f jobs.File, planned, ticket admission.Ticket, build func(Model) (prompt, error), perr error) error {
	cfg := &w.cfg
	fb := &fallbackError{reason: FallbackPaused, err: perr}
	if moved, err := w.fallBack(ctx, f, ticket, after(cfg.Models, planned.Model, f.Model), fb, build); moved {
		return err
	}
	if err := cfg.Attempts.SetMoved(ctx, ticket.ID, Move{Model: planned.Model, Tokens: planned.Tokens, Output: planned.Output, Stay: true}, moveKeep(cfg.Budget)); err != nil {
		return err
	}
	cfg.Log.InfoContext(ctx, "a job's fallback is too small for it: back to the model it was planned for", "pr", f.PR.String(), "task", ticket.ID, "fallback", f.Model, "to", planned.Model, "err", perr)
	return backToAdmission(ctx, cfg.Requeue, planned, 0, fmt.Errorf("too large for fallback %s: back to %s: %w", f.Model, planned.Model, perr))
}

// moveKeep is how long a move's record lasts: as long as the job may
// retry (as its attempts record).
func moveKeep(b RetryBudget) time.Duration { return 2*b.MaxAge + time.Hour }

// Waiting for a twin: a job whose prompt another job is answering goes
// back to admission for reuseWait, at most maxReuseWaits times, counted
// apart from its runs (then it pays rather than waits): 30 s, what a slow
// call takes; on the flex lane reuseWaitFlex (5 minutes in all).
const (
	reuseWait     = 2 * time.Second
	reuseWaitFlex = 20 * time.Second
	maxReuseWaits = 15
)

var errTwinInFlight = errors.New("the same prompt is being answered by another job; waiting for its result")

// keep records a bought result for reuse (key "" keeps nothing). A
// failure costs only a later job's second purchase.
func (w *FileWorker) keep(ctx context.Context, key string, res store.Result) {
	if key == "" {
		return
	}
	if err := w.cfg.Reuse.SaveReusable(ctx, key, res); err != nil {
		w.cfg.Log.WarnContext(ctx, "could not keep a result for reuse", "path", res.Path, "err", err)
	}
}

func (w *FileWorker) complete(ctx context.Context, f jobs.File, res store.Result) error {
	last, err := w.cfg.Store.CompleteFile(ctx, f.PR, f.HeadSHA, res)
	if err != nil {
		return err
	}
	id := jobs.FileTaskID(f)
	if w.cfg.Batch.Serves(f.Model) {
		w.cfg.Batch.forget(ctx, f.Model, id)
	}
	if err := w.cfg.Attempts.Forget(ctx, id); err != nil {
		// the record expires on its own; until then the id starts counted
		w.cfg.Log.WarnContext(ctx, "could not forget a finished job's attempts", "task", id, "err", err)
	}
	if last {
		return enqueueFinalize(ctx, w.cfg.Queue, jobs.Finalize{PR: f.PR, HeadSHA: f.HeadSHA, Tier: f.Tier, Run: f.PRSeq})
	}
	if w.cfg.Progress != nil {
		w.cfg.Progress(ctx, f.PR, f.HeadSHA)
	}
	return nil
}
