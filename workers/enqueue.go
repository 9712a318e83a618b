package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// CancelStore ends a PR's run and lists its jobs (a *store.Store).
type CancelStore interface {
	Cancel(ctx context.Context, pr jobs.PR) (head string, err error)
	TaskIDs(ctx context.Context, pr jobs.PR, head string) ([]string, error)
	ActiveRunsFrom(ctx context.Context, start, limit int64) ([]store.Run, error)
}

var _ CancelStore = (*store.Store)(nil)

// EnqueuerConfig configures an Enqueuer.
type EnqueuerConfig struct {
	// Queue enqueues plan jobs. Required.
	Queue TaskQueue
	// Tickets submits chat jobs and drops a cancelled PR's. Required.
	Tickets Tickets
	// Store ends a cancelled PR's run. Required.
	Store CancelStore
	// ChatModel answers chat; its Name is required.
	ChatModel Model
	// Retention keeps a finished plan's task id taken, so a redelivered
	// webhook enqueues nothing. Defaults to 72h.
	Retention time.Duration
	// NowFunc stamps chat jobs. Defaults to time.Now.
	NowFunc func() time.Time
	// Log defaults to discarding.
	Log *slog.Logger
}

// Enqueuer is how the webhook receiver hands work over: it only writes
// to Redis, never calls GitHub or the LLM, so a serve process needs no
// handlers, GitHub App key or provider key.
type Enqueuer struct{ cfg EnqueuerConfig }

// NewEnqueuer returns an Enqueuer.
func NewEnqueuer(cfg EnqueuerConfig) (*Enqueuer, error) {
	switch {
	case cfg.Queue == nil:
		return nil, errors.New("workers: enqueuer: Queue is required")
	case cfg.Tickets == nil:
		return nil, errors.New("workers: enqueuer: Tickets is required")
	case cfg.Store == nil:
		return nil, errors.New("workers: enqueuer: Store is required")
	case cfg.ChatModel.Name == "":
		return nil, errors.New("workers: enqueuer: ChatModel.Name is required")
	case cfg.Retention < 0:
		return nil, errors.New("workers: enqueuer: Retention must not be negative")
	}
	cfg.ChatModel = cfg.ChatModel.withDefaults()
	if cfg.Retention == 0 {
		cfg.Retention = 72 * time.Hour
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	cfg.Log = logOrDiscard(cfg.Log)
	return &Enqueuer{cfg: cfg}, nil
}

// Plan enqueues a PR's planning job, once per delivery.
func (e *Enqueuer) Plan(ctx context.Context, p jobs.Plan) (bool, error) {
	_, err := e.cfg.Queue.EnqueueContext(ctx, asynq.NewTask(jobs.TypePlan, jobs.Marshal(p)),
		asynq.TaskID(jobs.PlanTaskID(p)), asynq.Queue(p.Tier.Queue()), asynq.Retention(e.cfg.Retention),
		asynq.MaxRetry(10), asynq.Timeout(5*time.Minute))
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("enqueue plan: %w", err)
	}
	return true, nil
}

// Chat holds a chat reply in the chat queue and registers it for
// admission, once per comment. A refusal (a comment over the chat
// limits) makes no LLM call: it is enqueued to run at once.
func (e *Enqueuer) Chat(ctx context.Context, c jobs.Chat) (bool, error) {
	c.Model = e.cfg.ChatModel.Name
	c.Created = e.cfg.NowFunc().UnixMilli()
	if c.Refusal {
		_, err := e.cfg.Queue.EnqueueContext(ctx, asynq.NewTask(jobs.TypeChat, jobs.Marshal(c)), asynq.TaskID(jobs.ChatTaskID(c)),
			asynq.Queue(jobs.QueueChat), asynq.MaxRetry(8), asynq.Timeout(time.Minute), asynq.Retention(e.cfg.Retention))
		if errors.Is(err, asynq.ErrTaskIDConflict) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("enqueue chat refusal: %w", err)
		}
		return true, nil
	}
	c.Estimate, c.EstimateOutput = EstimateChat(c, e.cfg.ChatModel)
	return e.cfg.Tickets.Submit(ctx, asynq.NewTask(jobs.TypeChat, jobs.Marshal(c)), ChatTicket(c),
		asynq.MaxRetry(8), asynq.Timeout(5*time.Minute), asynq.Retention(e.cfg.Retention))
}

// Command enqueues a comment's command in the chat queue, once per
// comment (its task id; kept for the retention so a redelivery is a
// duplicate). It calls no LLM itself.
func (e *Enqueuer) Command(ctx context.Context, c jobs.Command) (bool, error) {
	_, err := e.cfg.Queue.EnqueueContext(ctx, asynq.NewTask(jobs.TypeCommand, jobs.Marshal(c)), asynq.TaskID(jobs.CommandTaskID(c)),
		asynq.Queue(jobs.QueueChat), asynq.MaxRetry(8), asynq.Timeout(time.Minute), asynq.Retention(e.cfg.Retention))
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("enqueue command: %w", err)
	}
	return true, nil
}

// Cancel drops a closed or drafted PR's pending work.
func (e *Enqueuer) Cancel(ctx context.Context, pr jobs.PR) error {
	head, err := e.cfg.Store.Cancel(ctx, pr)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	supersede(ctx, e.cfg.Store, e.cfg.Tickets, e.cfg.Log, pr, head)
	return nil
}

// CancelInstallation drops the pending work of an installation's runs in
// progress (uninstalled or suspended), or of its runs in repos only
// (repositories removed from it): tickets out of admission, held tasks
// deleted, runs cancelled. Jobs already released or running find the
// installation disabled, or their run cancelled, and exit without a call.
// It returns the runs cancelled.
func (e *Enqueuer) CancelInstallation(ctx context.Context, inst int64, repos []string) (int, error) {
	only := map[string]bool{}
	for _, r := range repos {
		only[strings.ToLower(r)] = true
	}
	var prs []jobs.PR
	const page = 500
	for start := int64(0); ; start += page {
		runs, err := e.cfg.Store.ActiveRunsFrom(ctx, start, page)
		if err != nil {
			return 0, err
		}
		for _, r := range runs {
			if r.PR.Installation == inst && (len(repos) == 0 || only[strings.ToLower(r.PR.Repo)]) {
				prs = append(prs, r.PR)
			}
		}
		if len(runs) < page {
			break
		}
	}
	// cancelled after listing: a cancelled run leaves the index, which
	// would shift the pages
	for _, pr := range prs {
		if err := e.Cancel(ctx, pr); err != nil {
			return 0, err
		}
	}
	if len(prs) > 0 {
		e.cfg.Log.InfoContext(ctx, "installation's runs cancelled", "installation", inst, "runs", len(prs), "repos", len(repos))
	}
	return len(prs), nil
}
