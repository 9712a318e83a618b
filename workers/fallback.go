package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
)

// A summary or review job whose model cannot serve it moves to the next
// of the model's fallbacks (Model.Fallbacks) through admission: in the
// fallback's own bucket and order, under the tenant's same quota, never
// around admission. It moves when the provider failed its call (a 5xx,
// an overload, a call that could not be sent), when the model is paused
// (its one key refused, or every key paused: FallbackMover moves the
// jobs waiting for it), never because of a wait (batch work waits its
// turn). The fallbacks' own fallbacks are not followed; on the last one
// a job retries as usual. A result made by a fallback says so in the
// summary.
//
// Where a job waits is kept in its attempts record (Move): the task's
// payload names the model it was planned for, and the record the one it
// moved to, with the estimate it was registered under.

// Fallback reasons: the labels of prq_jobs_fallbacks_total.
const (
	FallbackProvider = "provider" // the provider failed the call
	FallbackPaused   = "paused"   // the model (or every key of it) is paused
)

// Move is where a job waits that moved to a fallback model: the model,
// and the estimate (and its output part) admission charges it there.
type Move struct {
	Model          string
	Tokens, Output int64
	// Stay: the job is not moved again (it came back to the model it was
	// planned for, its fallbacks too small for it).
	Stay bool
	// Standard: flex processing refused the job once; it is called at
	// the standard tier from then on (SetStandard).
	Standard bool
}

// after returns the models a job planned for origin may move to from
// cur, in order: origin's fallbacks past cur.
func after(models map[string]Model, origin, cur string) []string {
	chain := models[origin].Fallbacks
	if cur == origin {
		return chain
	}
	if i := slices.Index(chain, cur); i >= 0 {
		return chain[i+1:]
	}
	return nil
}

// MoveWaiting is the side of admission that moves waiting tickets
// (admission's Scheduler).
type MoveWaiting interface {
	Paused(ctx context.Context) map[string]string
	Waiting(ctx context.Context, model string, offset, n int) ([]admission.Waiting, error)
	Take(ctx context.Context, model, id string) (bool, error)
	Register(ctx context.Context, t admission.Ticket) (bool, error)
	Task(queue, id string) (*asynq.TaskInfo, error)
}

var _ MoveWaiting = (*admission.Scheduler)(nil)

// FallbackMoverConfig configures a FallbackMover.
type FallbackMoverConfig struct {
	// Admission lists and moves the waiting tickets. Required.
	Admission MoveWaiting
	// Attempts keeps each moved job's model. Required.
	Attempts Attempter
	// Models are the configured models and their fallbacks.
	Models map[string]Model
	// Budget is the batch jobs' retry budget: a move's record lasts as
	// long as the job may retry. Defaults to DefaultBatchBudget.
	Budget RetryBudget
	// Batch bounds the tickets moved off one model in one pass. Defaults
	// to 200.
	Batch int
	// FallbackFunc, when set, counts each move by model and reason
	// (prq_jobs_fallbacks_total).
	FallbackFunc func(from, to, reason string)
	// Log defaults to discarding.
	Log *slog.Logger
}

// FallbackMover moves the summary and review jobs waiting for a paused
// model to its next fallback that is not paused; every worker process
// runs one (a ticket is taken once: a move is never made twice). Chat is
// not moved.
type FallbackMover struct {
	cfg  FallbackMoverConfig
	kick chan struct{}
}

// NewFallbackMover returns a FallbackMover.
func NewFallbackMover(cfg FallbackMoverConfig) (*FallbackMover, error) {
	switch {
	case cfg.Admission == nil:
		return nil, errors.New("workers: fallback mover: Admission is required")
	case cfg.Attempts == nil:
		return nil, errors.New("workers: fallback mover: Attempts is required")
	case cfg.Batch < 0:
		return nil, errors.New("workers: fallback mover: Batch must not be negative")
	}
	b, err := cfg.Budget.orDefault(DefaultBatchBudget, "fallback mover")
	if err != nil {
		return nil, err
	}
	cfg.Budget = b
	if cfg.Batch == 0 {
		cfg.Batch = 200
	}
	ms, err := models(cfg.Models)
	if err != nil {
		return nil, err
	}
	cfg.Models = ms
	cfg.Log = logOrDiscard(cfg.Log)
	return &FallbackMover{cfg: cfg, kick: make(chan struct{}, 1)}, nil
}

// hasFallbacks reports whether any model has fallbacks.
func hasFallbacks(ms map[string]Model) bool {
	for _, m := range ms {
		if len(m.Fallbacks) > 0 {
			return true
		}
	}
	return false
}

// Kick asks Run for a pass now (a model was just paused); it never
// blocks.
func (m *FallbackMover) Kick() {
	select {
	case m.kick <- struct{}{}:
	default: // a pass is asked for already
	}
}

// passPages bounds the pages of Batch waiting tickets one pass reads of
// a paused model.
const passPages = 5

// Run moves jobs every period, and when kicked, until ctx ends.
func (m *FallbackMover) Run(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		case <-t.C:
		}
		if _, err := m.Pass(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Log.WarnContext(ctx, "moving jobs off a paused model failed; the next pass tries again", "err", err)
		}
	}
}

// Pass moves, once, the waiting jobs of every paused model that have a
// fallback not paused, and returns how many moved.
func (m *FallbackMover) Pass(ctx context.Context) (int, error) {
	cfg := &m.cfg
	paused := cfg.Admission.Paused(ctx)
	moved := 0
	var errs []error
	for model := range paused {
		// page by page, oldest first: tickets that never move (chat, jobs
		// that stay) do not hide the others; at most passPages a pass
		offset := 0
		for page := 0; page < passPages; page++ {
			waiting, err := cfg.Admission.Waiting(ctx, model, offset, cfg.Batch)
			if err != nil {
				errs = append(errs, err)
				break
			}
			kept := 0
			for _, w := range waiting {
				ok, err := m.move(ctx, model, w, paused)
				if err != nil {
					errs = append(errs, err)
				}
				if ok {
					moved++
				} else {
					kept++
				}
			}
			if len(waiting) < cfg.Batch {
				break
			}
			offset += kept // the moved ones left the list
		}
	}
	return moved, errors.Join(errs...)
}

// move moves one waiting ticket of a paused model to the next fallback
// of its job's model that is not paused. The ticket is taken from the
// paused model first, then the move recorded, then the ticket registered
// under the fallback: a crash between leaves a held task without a
// ticket, which the admission reconciler registers again where the
// record says (see admission.RunConfig.Moved).
func (m *FallbackMover) move(ctx context.Context, from string, w admission.Waiting, paused map[string]string) (bool, error) {
	cfg := &m.cfg
	if w.Class == admission.ClassChat {
		return false, nil
	}
	info, err := cfg.Admission.Task(w.Queue, w.ID)
	if err != nil {
		return false, nil // gone, or the reconciler's to repair
	}
	t, ok := TicketOf(info.Type, info.Payload)
	if !ok {
		return false, nil
	}
	to := ""
	for _, f := range after(cfg.Models, t.Model, from) {
		if _, p := paused[f]; !p && fitsModel(cfg.Models[f], w) {
			to = f
			break
		}
	}
	if to == "" {
		return false, nil
	}
	if mv, err := cfg.Attempts.Moved(ctx, w.ID); err != nil || mv.Stay {
		return false, err // its fallbacks are too small for it: it waits here
	}
	taken, err := cfg.Admission.Take(ctx, from, w.ID)
	if err != nil || !taken {
		return false, err // admitted meanwhile, or moved by another process
	}
	t.Model, t.Tokens, t.Output, t.Enqueued = to, w.Tokens, w.Output, w.Enqueued
	if err := cfg.Attempts.SetMoved(ctx, w.ID, Move{Model: to, Tokens: w.Tokens, Output: w.Output}, moveKeep(cfg.Budget)); err != nil {
		return false, fmt.Errorf("%w (the job waits without a ticket until the reconciler registers it again)", err)
	}
	if _, err := cfg.Admission.Register(ctx, t); err != nil {
		return false, fmt.Errorf("%w (the reconciler registers it again)", err)
	}
	if cfg.FallbackFunc != nil {
		cfg.FallbackFunc(from, to, FallbackPaused)
	}
	cfg.Log.InfoContext(ctx, "a job moved to a fallback model: its model is paused", "task", w.ID, "from", from, "to", to, "why", paused[from])
	return true, nil
}

// fitsModel says whether a waiting job's estimate fits model m (a
// configured one): its limits admit it and its context holds it. Its
// prompt, built when it runs, may still not fit (a job whose fallback is
// too small moves on: FileWorker).
func fitsModel(m Model, w admission.Waiting) bool {
	if m.Name == "" {
		return false
	}
	if m.ContextTokens > 0 && w.Tokens > int64(m.ContextTokens) {
		return false
	}
	out := max(w.Output, 0)
	return m.Limits == nil || m.Limits.Admissible(ratelimit.Values{Requests: 1, Tokens: w.Tokens, Input: w.Tokens - out, Output: out}) == nil
}

// MovedTicket returns t as it waits now: under the model its job moved
// to, with the estimate it was moved with (t unchanged when it did not
// move, or the record cannot be read: the reconciler asks again).
func MovedTicket(ctx context.Context, a Attempter, models map[string]Model, t admission.Ticket) admission.Ticket {
	if t.Class == admission.ClassChat || len(models[t.Model].Fallbacks) == 0 {
		return t
	}
	mv, err := a.Moved(ctx, t.ID)
	if err != nil || mv.Model == "" {
		return t
	}
	t.Model, t.Tokens, t.Output = mv.Model, mv.Tokens, splitOf(mv.Tokens, mv.Output)
	return t
}

// fellBack counts and logs a file job's move.
func (w *FileWorker) fellBack(ctx context.Context, f jobs.File, from, to, reason string, err error) {
	if w.cfg.FallbackFunc != nil {
		w.cfg.FallbackFunc(from, to, reason)
	}
	w.cfg.Log.InfoContext(ctx, "a job moved to a fallback model", "pr", f.PR.String(), "task", jobs.FileTaskID(f), "from", from, "to", to, "reason", reason, "err", err)
}
