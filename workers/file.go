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
	GetRun(ctx context.Context, pr jobs.PR) (store.Run, error)
	FileAndContext(ctx context.Context, pr jobs.PR, head string, index int) (store.FileData, string, error)
	Files(ctx context.Context, pr jobs.PR, head string) (map[int]store.FileData, error)
	CompleteFile(ctx context.Context, pr jobs.PR, head string, r store.Result) (last bool, err error)
	ReadFileJob(ctx context.Context, r store.FileJobRead) store.FileJobState
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
// head triggers finalize. It reads as its phases, in order: the job as
// admitted, the checks before its call, its prompt, the reuse of an
// answer already bought, then the call and its result. A phase before
// the call either fails (the reservation stays: asynq's retry calls
// under it) or ends the job early, and then leave — the one place that
// does it — gives the whole reservation back: an early return cannot
// forget to.
func (w *FileWorker) ProcessTask(ctx context.Context, t *asynq.Task) error {
	var ref fileRef
	if err := jobs.Unmarshal(t.Type(), t.Payload(), &ref); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	j, err := w.admitted(ctx, t, ref)
	if err != nil {
		return err
	}
	for _, phase := range []func(context.Context, *fileJob) (*early, error){w.checks, w.compose, w.reuseOrWait} {
		ex, err := phase(ctx, j)
		if err != nil {
			return err
		}
		if ex != nil {
			return w.leave(ctx, j, *ex)
		}
	}
	return w.callModel(ctx, j)
}

// fileJob is what a file job's phases learn and hand on.
type fileJob struct {
	t   *asynq.Task
	ref fileRef
	f   jobs.File
	// origin is the model the job was planned for; a job that moved to
	// a fallback (f.Model) was admitted under it
	origin  string
	mv      Move
	ticket  admission.Ticket
	inBatch bool
	at      attempt
	fd      store.FileData
	shared  string
	// files are the head's files, for its walkthrough
	files []store.FileData
	res   store.Result
	m     Model
	run   store.Run
	build func(Model) (prompt, error)
	pm    prompt
	// repairKey keeps a review's unreadable reply for its one repair
	repairKey string
	repair    struct{ Reply, Err string }
	reuse     string
}

// early ends a job before its call: leave gives the reservation back,
// then books (book) or only forgets a batch job's leftover outcome when
// leftover is set, then runs then.
type early struct {
	leftover, book bool
	then           func() error
}

// leave ends a job early: no call was made, so all of its reservation is
// refunded, before anything else the exit does.
func (w *FileWorker) leave(ctx context.Context, j *fileJob, ex early) error {
	settle(ctx, w.cfg.Ledger, w.cfg.Log, j.ticket, ratelimit.Cost{}) // no call: all refunded
	if ex.leftover {
		w.leftover(ctx, j.inBatch, j.f, j.ticket, ex.book)
	}
	return ex.then()
}

// admitted reads the job as admission holds it: under the model it moved
// to, if it moved, and in which lane; a job admitted is recorded started.
func (w *FileWorker) admitted(ctx context.Context, t *asynq.Task, ref fileRef) (*fileJob, error) {
	cfg := &w.cfg
	j := &fileJob{t: t, ref: ref, f: ref.File, origin: ref.Model}
	flex := cfg.Caller.flexFor(j.f.Tier, cfg.Models[j.origin])
	batch := w.batchFor(j.f.Tier, cfg.Models[j.origin])
	if len(cfg.Models[j.origin].Fallbacks) > 0 || flex || batch {
		var err error
		if j.mv, err = cfg.Attempts.Moved(ctx, jobs.FileTaskID(j.f)); err != nil {
			return nil, err
		}
		if j.mv.Model != "" {
			j.f.Model = j.mv.Model
		}
	}
	j.ticket = fileTicket(j.f)
	if j.mv.Model != "" {
		j.ticket.Tokens, j.ticket.Output = j.mv.Tokens, splitOf(j.mv.Tokens, j.mv.Output)
	}
	// a job of the batch lane is not admitted: it hands its request to
	// the lane, and its result run brings the answer back
	j.inBatch = batch && !j.mv.Standard && j.mv.Model == ""
	if !j.inBatch {
		started(ctx, cfg.Ledger, cfg.Log, j.ticket)
	}
	return j, nil
}

// revoked is the early exit of a job whose head was superseded.
var revoked = early{leftover: true, book: true, then: func() error {
	return fmt.Errorf("stale job of a superseded head: %w", asynq.RevokeTask)
}}

// checks runs what decides whether the job calls at all: its
// installation's gate, its head still current, no result recorded yet,
// its retry budget, its file, its model and its run.
func (w *FileWorker) checks(ctx context.Context, j *fileJob) (*early, error) {
	cfg, f := &w.cfg, j.f
	// what the checks need, in one round trip; the installation's record
	// only when the gate has no answer without it
	q := w.gate.ask(ctx, f.PR.Installation)
	st := cfg.Store.ReadFileJob(ctx, store.FileJobRead{PR: f.PR, Head: f.HeadSHA, Kind: f.Kind, Index: f.Index,
		File: j.ref.FileIndex, NoFile: f.Walkthrough, Installation: f.PR.Installation, ReadInstallation: q.fold})
	if q.fold {
		q = w.gate.learned(f.PR.Installation, q, st.Disabled, st.DisabledErr)
	}
	if err := w.gate.judge(ctx, f.PR.Installation, string(f.Kind), q.why, q.err); err != nil {
		return &early{leftover: true, book: true, then: func() error { return err }}, nil
	}
	// the run, read once: whether the head is current, and its title,
	// body and instructions for the prompt
	var err error
	if j.run, err = st.Run, st.RunErr; errors.Is(err, store.ErrNotFound) {
		return &revoked, nil
	} else if err != nil {
		return nil, err
	}
	if j.run.Head != f.HeadSHA || j.run.State == store.StateCancelled {
		return &revoked, nil
	}
	if st.DoneErr != nil {
		return nil, st.DoneErr
	} else if st.Done {
		// a retry after the result was recorded (finalize's enqueue
		// failed, or a crash came between): no second call; finalize
		// when the head is all done; the leftover is booked by the run
		// that recorded it
		return &early{leftover: true, then: func() error {
			run, err := cfg.Store.GetRun(ctx, f.PR) // afresh: the result may have come after the read above
			if err != nil {
				return err
			}
			if run.Head == f.HeadSHA && run.State == store.StateRunning && run.AllDone() {
				return enqueueFinalize(ctx, cfg.Queue, jobs.Finalize{PR: f.PR, HeadSHA: f.HeadSHA, Tier: f.Tier, Run: f.PRSeq})
			}
			return nil
		}}, nil
	}
	if j.at, err = budgeted(ctx, cfg.Attempts, j.ticket.ID, f.Created, cfg.Budget, cfg.NowFunc()); err != nil {
		return nil, err
	}
	if f.Walkthrough {
		j.files, j.shared, err = headFiles(ctx, cfg.Store, f.PR, f.HeadSHA)
	} else {
		j.fd, j.shared, err = st.File, st.Shared, st.FileErr
	}
	if err != nil {
		return nil, err
	}
	j.res = store.Result{Kind: f.Kind, Path: j.fd.Path, Index: f.Index, Run: f.PRSeq, Model: f.Model, Walkthrough: f.Walkthrough}
	var ok bool
	if j.m, ok = cfg.Models[f.Model]; !ok {
		return &early{then: func() error {
			j.res.Skipped = "model " + f.Model + " is not configured"
			return w.complete(ctx, f, j.res)
		}}, nil
	}
	return nil, nil
}

// compose builds the job's prompt for its model, and reads a review's
// unreadable reply to repair, if it has one.
func (w *FileWorker) compose(ctx context.Context, j *fileJob) (*early, error) {
	cfg, f := &w.cfg, j.f
	title := j.run.Title
	if title == "" {
		title = f.PR.String()
	}
	j.build = func(m Model) (prompt, error) {
		pc := contextOf(title, j.run.Body).withRepo(j.run.Instructions, j.run.Language).withShared(j.shared)
		if f.Walkthrough {
			return walkthroughPrompt(pc, j.files, m, w.tok[m.Name])
		}
		return buildMovedPrompt(f.Kind, pc, j.fd, cfg.Models[j.origin], w.tok[j.origin], m, w.tok[m.Name], f.Part)
	}
	var perr error
	j.pm, perr = j.build(j.m)
	j.pm.cacheKey = cacheKeyOf(f.PR)
	if perr != nil {
		return &early{then: func() error { return w.unbuilt(ctx, j, perr) }}, nil
	}
	j.res.Part, j.res.Parts = f.Part, f.Parts
	if f.Model != j.origin {
		j.res.Fallback = f.Model
		if j.pm.estimate > j.ticket.Tokens {
			// moved under its first model's estimate (FallbackMover):
			// admitted again under this model's own, so its bucket is
			// charged no less than the call takes
			return &early{then: func() error {
				j.ticket.Tokens, j.ticket.Output = j.pm.estimate, j.pm.output
				if err := cfg.Attempts.SetMoved(ctx, j.ticket.ID, Move{Model: f.Model, Tokens: j.pm.estimate, Output: j.pm.output}, moveKeep(cfg.Budget)); err != nil {
					return err
				}
				return backToAdmission(ctx, cfg.Requeue, j.ticket, 0, errors.New("estimate of the fallback model is larger than the one the job was moved with"))
			}}, nil
		}
	}
	// A repair attempt: the unreadable reply and what was wrong with it
	// follow the prompt.
	j.repairKey = "repair:" + j.ticket.ID
	if f.Kind == jobs.KindReview && !j.at.fresh { // a repair comes back as a later run
		if raw, err := cfg.Repairs.Draft(ctx, f.PR, j.repairKey); err != nil {
			return nil, err
		} else if raw != "" && json.Unmarshal([]byte(raw), &j.repair) != nil {
			j.repair.Reply = ""
		}
	}
	return nil, nil
}

// unbuilt ends a job whose prompt could not be built: one moved to a
// fallback too small for it goes back to its planned model; another is
// recorded skipped (too large) or failed (its patch unreadable).
func (w *FileWorker) unbuilt(ctx context.Context, j *fileJob, perr error) error {
	f, res := j.f, j.res
	if f.Model != j.origin && errors.Is(perr, errTooLarge) {
		return w.outgrown(ctx, f, fileTicket(j.ref.File), j.ticket, j.build, perr)
	}
	res.Skipped = "too large for " + f.Model
	var ce *ratelimit.CostError
	if errors.As(perr, &ce) {
		res.Skipped += fmt.Sprintf("'s rate limits (its call needs %d %s; one call may take %d)", ce.Cost, ce.Dimension, ce.Burst)
	}
	if !errors.Is(perr, errTooLarge) {
		res.Skipped, res.Failed = "the patch could not be read", true
		w.cfg.Log.WarnContext(ctx, "patch could not be read", "pr", f.PR.String(), "path", j.fd.Path, "err", perr)
	}
	return w.complete(ctx, f, res)
}

// reuseOrWait never pays twice for the same work: a prompt answered
// already (for a head this one replaced, a run reopened) is reused; one
// being answered by another job now is waited for, a few times.
func (w *FileWorker) reuseOrWait(ctx context.Context, j *fileJob) (*early, error) {
	cfg, f := &w.cfg, j.f
	if cfg.Reuse != nil && j.repair.Reply == "" {
		j.reuse = promptKey(f, j.m, j.pm)
	}
	// a review asked for again ("full review", its round) buys new work
	if j.reuse == "" || j.run.Round != "" {
		return nil, nil
	}
	var r store.Result
	var found, mine bool
	var err error
	if j.inBatch { // a batch's twin is not waited for: it may take hours
		r, found, err = cfg.Reuse.Reusable(ctx, j.reuse)
		mine = true
	} else {
		r, found, mine, err = cfg.Reuse.ReusableOrClaim(ctx, j.reuse, j.ticket.ID)
	}
	if err != nil {
		return nil, err
	}
	if found {
		return &early{leftover: true, book: true, then: func() error { return w.reused(ctx, j, r) }}, nil
	}
	if mine {
		return nil, nil
	}
	n, err := cfg.Attempts.ReuseWait(ctx, j.ticket.ID, moveKeep(cfg.Budget))
	if err != nil {
		return nil, err
	}
	if n > maxReuseWaits {
		return nil, nil
	}
	return &early{then: func() error {
		wait := reuseWait
		if !j.mv.Standard && cfg.Caller.flexFor(f.Tier, j.m) {
			wait = reuseWaitFlex // its twin is as slow
		}
		return backToAdmission(ctx, cfg.Requeue, j.ticket, wait, errTwinInFlight)
	}}, nil
}

// reused records the answer of the same prompt bought already as the
// job's result, at no cost.
func (w *FileWorker) reused(ctx context.Context, j *fileJob, r store.Result) error {
	cfg, f, res := &w.cfg, j.f, j.res
	r.Kind, r.Path, r.Index, r.Run, r.Part, r.Parts, r.Fallback, r.Model, r.Walkthrough = res.Kind, res.Path, res.Index, res.Run, res.Part, res.Parts, res.Fallback, res.Model, res.Walkthrough
	r.Cost = 0 // nothing bought for it
	for i := range r.Comments {
		r.Comments[i].Path = j.fd.Path
	}
	if cfg.ReusedFunc != nil {
		cfg.ReusedFunc(f.Model, string(f.Kind))
	}
	cfg.Log.DebugContext(ctx, "result reused: the same prompt was answered already", "pr", f.PR.String(), "path", j.fd.Path, "kind", f.Kind)
	return w.complete(ctx, f, r)
}

// callModel makes the job's call (or hands it to the batch lane); the
// call settles the reservation on its own path.
func (w *FileWorker) callModel(ctx context.Context, j *fileJob) error {
	cfg, f, m := &w.cfg, j.f, j.m
	if j.repair.Reply != "" {
		j.pm.turns = review.RepairTurns(j.repair.Reply, errors.New(j.repair.Err))
		if err := j.pm.measure(m, w.tok[f.Model]); err != nil {
			return err
		}
	}
	next := after(cfg.Models, j.origin, f.Model)
	spec := callSpec{ticket: j.ticket, kind: f.Kind, tier: f.Tier, inst: f.PR.Installation, prompt: j.pm, model: m, retried: retried(ctx), maxRetry: maxRetry(ctx), attempt: j.at, fallback: len(next) > 0,
		flex: !j.mv.Standard && cfg.Caller.flexFor(f.Tier, m)}
	var out llm.Response
	var err error
	if j.inBatch {
		spec.lane, spec.fallback = LaneBatch, false
		out, err = w.viaBatch(ctx, j.t, f, spec)
		if errors.Is(err, errHanded) {
			return nil // its result run records it
		}
	} else {
		out, err = cfg.Caller.call(ctx, spec)
	}
	if err != nil {
		return w.callFailed(ctx, j, next, err)
	}
	return w.answered(ctx, j, out)
}

// callFailed ends a job whose call failed: to the standard lane, back to
// admission, to a fallback model, waiting for the quota, recorded
// skipped, or the error for asynq to retry.
func (w *FileWorker) callFailed(ctx context.Context, j *fileJob, next []string, err error) error {
	cfg, f, ticket, res := &w.cfg, j.f, j.ticket, j.res
	var e *ended
	if !errors.As(err, &e) {
		return err
	}
	switch e.step {
	case endStandardLane:
		return w.toStandard(ctx, j.t, f, ticket, e.err)
	case endFlex:
		// the standard lane from now on: it waits its turn again
		if serr := cfg.Attempts.SetStandard(ctx, ticket.ID, moveKeep(cfg.Budget)); serr != nil {
			return fmt.Errorf("%w (and recording the standard lane failed: %v)", e.err, serr)
		}
		cfg.Log.InfoContext(ctx, "flex processing refused the call: back to admission for the standard lane", "pr", f.PR.String(), "task", ticket.ID, "model", f.Model, "err", e.err)
		return backToAdmission(ctx, cfg.Requeue, ticket, 0, e.err)
	case endFallback:
		if moved, merr := w.fallBack(ctx, f, ticket, next, e, j.build); moved {
			return merr
		}
		return w.callFailed(ctx, j, nil, e.otherwise()) // no fallback can take it
	case endWait:
		return w.waitForQuota(ctx, f, ticket, e.until)
	}
	res.Skipped, res.Failed = e.reason, e.failed
	if e.gaveUp != "" && cfg.GaveUpFunc != nil {
		cfg.GaveUpFunc(string(f.Kind), e.gaveUp)
	}
	return w.complete(ctx, f, res)
}

// answered records the call's answer: a summary's text, or a review's
// findings; a review reply that cannot be read is repaired once.
func (w *FileWorker) answered(ctx context.Context, j *fileJob, out llm.Response) error {
	cfg, f, m, res := &w.cfg, j.f, j.m, j.res
	res.Tokens = out.PromptTokens + out.OutputTokens
	res.Cost = m.Prices.Of(out).Cost(out)
	if j.pm.truncated > 0 {
		res.Skipped = fmt.Sprintf("partial: %d hunks did not fit the model", j.pm.truncated)
	}
	if f.Kind != jobs.KindReview {
		res.Text = out.Text
		w.keep(ctx, j.reuse, res)
		return w.complete(ctx, f, res)
	}
	reply, perr := review.Parse(out.Text)
	if perr != nil {
		if cfg.UnusableFunc != nil {
			cfg.UnusableFunc(f.Model, string(f.Kind))
		}
		if j.repair.Reply == "" {
			return w.repairOnce(ctx, j, out.Text, perr)
		}
		cfg.Log.WarnContext(ctx, "review reply unusable after a repair attempt; the file is shown as failed", "pr", f.PR.String(), "path", j.fd.Path, "model", f.Model, "err", perr)
		res.Skipped, res.Failed = "review failed: the model's reply could not be read", true
		return w.complete(ctx, f, res)
	}
	if len(reply.Ignored) > 0 {
		if cfg.IgnoredFunc != nil {
			cfg.IgnoredFunc(f.Model, string(f.Kind), reply.Ignored)
		}
		cfg.Log.DebugContext(ctx, "review reply carried fields prq does not use", "model", f.Model, "fields", reply.Ignored)
	}
	placeFindings(&res, j.fd.Path, reply, j.pm.patch)
	w.keep(ctx, j.reuse, res)
	return w.complete(ctx, f, res)
}

// repairOnce keeps a review's unreadable reply and sends the job for one
// repair attempt, through admission like any call.
func (w *FileWorker) repairOnce(ctx context.Context, j *fileJob, text string, perr error) error {
	cfg, f, ticket := &w.cfg, j.f, j.ticket
	b, _ := json.Marshal(struct{ Reply, Err string }{text, perr.Error()})
	if err := cfg.Repairs.SetDraft(ctx, f.PR, j.repairKey, string(b)); err != nil {
		return err
	}
	j.pm.turns = review.RepairTurns(text, perr)
	if err := j.pm.measure(j.m, w.tok[f.Model]); err == nil {
		ticket.Tokens = j.pm.estimate
	}
	cfg.Log.WarnContext(ctx, "review reply unusable; asking the model once more", "pr", f.PR.String(), "path", j.fd.Path, "model", f.Model, "err", perr)
	if j.inBatch {
		// the repair is a call of its own, in the standard lane
		return w.toStandard(ctx, j.t, f, ticket, perr)
	}
	return backToAdmission(ctx, cfg.Requeue, ticket, 0, perr)
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
func (w *FileWorker) fallBack(ctx context.Context, f jobs.File, ticket admission.Ticket, next []string, fb *ended, build func(Model) (prompt, error)) (moved bool, err error) {
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
		w.fellBack(ctx, f, from, to, fb.fallback, fb.err)
		if fb.fallback == FallbackPaused && cfg.Paused != nil {
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
	fb := &ended{step: endFallback, fallback: FallbackPaused, err: perr}
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
