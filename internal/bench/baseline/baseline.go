// Package baseline implements the ways teams gate LLM jobs today, so
// prq bench can run them side by side with prq's admission on the same
// workload: asynq's documented rate-limit recipe (a per-process limiter,
// RateLimitError, IsFailure and RetryDelayFunc), a handler-wait gate
// (dequeue, then block on the shared bucket), and naive calls with
// exponential backoff on 429. They enqueue LLM jobs straight into their
// queues; there is no admission order. They are measured, not used.
package baseline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/ratelimit"
)

// Strategy names.
const (
	Recipe = "asynq-recipe"
	Wait   = "handler-wait"
	Naive  = "naive"
)

// Direct enqueues LLM jobs as ordinary pending tasks. For the
// handler-wait strategy it also settles the shared bucket it waits on.
type Direct struct {
	Client  *asynq.Client
	Buckets map[string]*ratelimit.Bucket // nil but for handler-wait
	// MaxRetry of LLM tasks. Defaults to 25.
	MaxRetry int
}

// Submit enqueues the task pending, under the ticket's id.
func (d *Direct) Submit(ctx context.Context, task *asynq.Task, t admission.Ticket, opts ...asynq.Option) (bool, error) {
	if d.MaxRetry == 0 {
		d.MaxRetry = 25
	}
	opts = append(opts, asynq.TaskID(t.ID), asynq.Queue(t.Queue), asynq.MaxRetry(d.MaxRetry))
	_, err := d.Client.EnqueueContext(ctx, task, opts...)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return false, nil
	}
	return err == nil, err
}

// SubmitMany enqueues each task as Submit does, in order.
func (d *Direct) SubmitMany(ctx context.Context, subs []admission.Submission) ([]bool, error) {
	out := make([]bool, len(subs))
	for i, sub := range subs {
		ok, err := d.Submit(ctx, sub.Task, sub.Ticket, sub.Opts...)
		if err != nil {
			return out, err
		}
		out[i] = ok
	}
	return out, nil
}

// Register does nothing: a retried task is asynq's to schedule.
func (d *Direct) Register(context.Context, admission.Ticket) (bool, error) { return true, nil }

// RegisterAt does nothing.
func (d *Direct) RegisterAt(context.Context, admission.Ticket, time.Time) error { return nil }

// Started does nothing.
func (d *Direct) Started(context.Context, string, string) error { return nil }

// Settle settles the shared bucket of handler-wait.
func (d *Direct) Settle(ctx context.Context, model, id string, actual ratelimit.Cost) error {
	if b, ok := d.Buckets[model]; ok {
		return b.Settle(ctx, id, actual)
	}
	return nil
}

// Cancel does nothing: there is no ticket.
func (d *Direct) Cancel(context.Context, string, string) (bool, error) { return false, nil }

// DeleteTask deletes a pending task.
func (d *Direct) DeleteTask(string, string) {}

// Pause does nothing.
func (d *Direct) Pause(context.Context, string, string, time.Duration) error { return nil }

// PauseKey does nothing.
func (d *Direct) PauseKey(context.Context, string, int, string, time.Duration) error { return nil }

// KeyOf is always the first key: the baselines call with one.
func (d *Direct) KeyOf(context.Context, string, string) (int, error) { return 0, nil }

// Bucket returns handler-wait's shared bucket.
func (d *Direct) Bucket(model string) (*ratelimit.Bucket, bool) {
	b, ok := d.Buckets[model]
	return b, ok
}

// Models lists the buckets' models.
func (d *Direct) Models() []string {
	var out []string
	for m := range d.Buckets {
		out = append(out, m)
	}
	return out
}

// RateLimitError is asynq's recipe: not a failure, retried after the wait.
type RateLimitError struct{ RetryIn time.Duration }

func (e *RateLimitError) Error() string { return fmt.Sprintf("rate limited: retry in %s", e.RetryIn) }

// LocalLimiter is a per-process token bucket (the recipe's limiter):
// each of n processes gets 1/n of the provider's limits.
type LocalLimiter struct {
	mu      sync.Mutex
	buckets map[string]*local
}

type local struct {
	req, tok, rpsReq, rpsTok, capReq, capTok float64
	last                                     time.Time
}

// NewLocalLimiter splits each model's limits over processes.
func NewLocalLimiter(limits map[string]ratelimit.Limits, processes int) *LocalLimiter {
	l := &LocalLimiter{buckets: map[string]*local{}}
	for m, lim := range limits {
		per := lim.Period.Seconds()
		share := 1 / float64(max(processes, 1))
		b := &local{capReq: float64(lim.RequestsPerPeriod) * share, capTok: float64(lim.TokensPerPeriod) * share,
			rpsReq: float64(lim.RequestsPerPeriod) * share / per, rpsTok: float64(lim.TokensPerPeriod) * share / per, last: time.Now()}
		b.req, b.tok = b.capReq, b.capTok
		l.buckets[m] = b
	}
	return l
}

// Gate admits t now or returns a *RateLimitError with the wait.
func (l *LocalLimiter) Gate(_ context.Context, t admission.Ticket) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[t.Model]
	if !ok {
		return nil
	}
	now := time.Now()
	el := now.Sub(b.last).Seconds()
	b.last = now
	b.req = math.Min(b.capReq, b.req+el*b.rpsReq)
	b.tok = math.Min(b.capTok, b.tok+el*b.rpsTok)
	need := math.Min(float64(t.Tokens), b.capTok)
	if b.req >= 1 && b.tok >= need {
		b.req--
		b.tok -= need
		return nil
	}
	wait := math.Max((1-b.req)/b.rpsReq, (need-b.tok)/b.rpsTok)
	return &RateLimitError{RetryIn: time.Duration(wait * float64(time.Second))}
}

// WaitGate blocks in the handler until the shared bucket admits the job.
func WaitGate(buckets map[string]*ratelimit.Bucket) func(ctx context.Context, t admission.Ticket) error {
	return func(ctx context.Context, t admission.Ticket) error {
		b, ok := buckets[t.Model]
		if !ok {
			return nil
		}
		cost := ratelimit.Cost{Requests: 1, Tokens: min(t.Tokens, b.Limits().BurstTokens)}
		for {
			d, err := b.Reserve(ctx, t.ID, cost)
			if err != nil {
				return err
			}
			if d.Admitted {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d.Wait):
			}
		}
	}
}

// IsFailure is the recipe's: rate limits are not failures.
func IsFailure(err error) bool {
	var rl *RateLimitError
	return !errors.As(err, &rl)
}

// RetryDelay waits a rate-limited task out, and backs off exponentially
// (1 s, 2 s, … up to 60 s) after any other error, such as a provider 429.
func RetryDelay(n int, err error, t *asynq.Task) time.Duration {
	var rl *RateLimitError
	if errors.As(err, &rl) {
		return rl.RetryIn
	}
	return min(time.Duration(1<<min(n, 6))*time.Second, time.Minute)
}
