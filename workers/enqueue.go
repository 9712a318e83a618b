package workers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/jobs"
)

// Enqueuer is how the webhook receiver hands work over: it only writes
// to Redis, never calls GitHub or the LLM.
type Enqueuer struct {
	w *Workers
	// Retention keeps a finished plan's task id taken, so a redelivered
	// webhook enqueues nothing. Defaults to 72h.
	Retention time.Duration
}

// Enqueuer returns the workers' enqueuer.
func (w *Workers) Enqueuer() *Enqueuer { return &Enqueuer{w: w, Retention: 72 * time.Hour} }

// Plan enqueues a PR's planning job, once per delivery.
func (e *Enqueuer) Plan(ctx context.Context, p jobs.Plan) (bool, error) {
	_, err := e.w.client.EnqueueContext(ctx, asynq.NewTask(jobs.TypePlan, jobs.Marshal(p)),
		asynq.TaskID(jobs.PlanTaskID(p)), asynq.Queue(p.Tier.Queue()), asynq.Retention(e.Retention),
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
// admission, once per comment.
func (e *Enqueuer) Chat(ctx context.Context, c jobs.Chat) (bool, error) {
	c.Model = e.w.cfg.ChatModel
	c.Created = time.Now().UnixMilli()
	c.Estimate = EstimateChat(c, e.w.cfg.Models[c.Model])
	return e.w.sched.Submit(ctx, asynq.NewTask(jobs.TypeChat, jobs.Marshal(c)), ChatTicket(c),
		asynq.MaxRetry(8), asynq.Timeout(5*time.Minute), asynq.Retention(e.Retention))
}

// Cancel drops a closed or drafted PR's pending work.
func (e *Enqueuer) Cancel(ctx context.Context, pr jobs.PR) error { return e.w.Cancel(ctx, pr) }
