package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/review"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
)

// Ledger is a running LLM job's record in admission: that it started,
// and what it really used, which keeps the shared bucket exact.
type Ledger interface {
	Started(ctx context.Context, model, id string) error
	Settle(ctx context.Context, model, id string, actual ratelimit.Cost) error
	// KeyOf is the index of the model's API key the job was charged to
	// (0 with one key): its call uses that key.
	KeyOf(ctx context.Context, model, id string) (int, error)
}

// Requeue puts an LLM job's ticket back in admission, now or later.
type Requeue interface {
	Register(ctx context.Context, t admission.Ticket) (bool, error)
	RegisterAt(ctx context.Context, t admission.Ticket, at time.Time) error
}

// Provider is what an LLM call tells admission about the provider: the
// rate-limit headers, to the bucket of the call's key; an account
// problem, as a pause of the model's admissions (with several keys, of
// the key's alone).
type Provider interface {
	Bucket(model string) (*ratelimit.Bucket, bool)
	Pause(ctx context.Context, model, reason string, d time.Duration) error
	PauseKey(ctx context.Context, model string, key int, reason string, d time.Duration) error
}

// Tickets is how planned work enters admission and superseded work
// leaves it.
type Tickets interface {
	Submit(ctx context.Context, task *asynq.Task, t admission.Ticket, opts ...asynq.Option) (bool, error)
	// SubmitMany submits as Submit does each, in order, and reports for
	// each whether its task was enqueued (false: one with its id exists).
	SubmitMany(ctx context.Context, subs []admission.Submission) ([]bool, error)
	Cancel(ctx context.Context, model, id string) (bool, error)
	DeleteTask(queue, id string)
	Models() []string
}

// Admitter is every side of admission the handlers use: prq's admission
// scheduler, or a benchmark baseline. The wiring passes one Admitter;
// each handler keeps only the sides it uses.
type Admitter interface {
	Tickets
	Ledger
	Requeue
	Provider
}

var _ Admitter = (*admission.Scheduler)(nil)

// TaskQueue enqueues an ordinary asynq task (an *asynq.Client).
type TaskQueue interface {
	EnqueueContext(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error)
}

var _ TaskQueue = (*asynq.Client)(nil)

// LLM makes one chat call.
type LLM interface {
	Complete(ctx context.Context, r llm.Request) (llm.Response, error)
}

// Model is what the workers need to know of a model: the configured
// model (llmcall.Model, built once from the configuration) and the kinds
// of job it is configured for.
type Model struct {
	llmcall.Model
	// Kinds are the kinds of job the model is configured for (jobs.*_model):
	// its prompts' instructions cover each, so all its prompts of a head
	// share one prefix. Empty: all.
	Kinds []jobs.Kind
}

// serves reports whether m is configured for jobs of kind.
func (m Model) serves(kind jobs.Kind) bool {
	return len(m.Kinds) == 0 || slices.Contains(m.Kinds, kind)
}

func (m Model) withDefaults() Model {
	if m.MaxOutput == 0 {
		m.MaxOutput = 1024
	}
	if m.ContextTokens == 0 {
		m.ContextTokens = 128000
	}
	if m.Output == "" {
		m.Output = review.DefaultFormat(m.Name)
	}
	return m
}

// TierSpec is a tier's plan.
type TierSpec struct {
	Review      bool
	QuotaTokens int64 // per quota period per installation; 0: unlimited
	// ChatQuotaTokens, when positive, is chat's own quota per period per
	// installation (quota agent "chat"): chat then draws on it instead of
	// QuotaTokens.
	ChatQuotaTokens int64
	// QuotaDollars, when positive, caps the installation's spend per
	// quota period in US dollars at its models' prices, as QuotaTokens
	// caps its tokens (chat included).
	QuotaDollars float64
	// Flex calls the tier's summary and review jobs at flex processing on
	// the models that serve it (half price, slower); a refusal sends the
	// job back to admission for the standard lane.
	Flex bool
	// Batch sends the tier's summary and review jobs, on the models a
	// provider's batch API serves, through the batch lane (half price,
	// answered within LaneWait); what a batch does not answer in time
	// goes to the standard lane.
	Batch bool
	// LaneWait is how long a job may wait in a discounted lane before it
	// goes to the standard lane. Defaults to 24h.
	LaneWait time.Duration
}

// laneWait is the tier's LaneWait, its default when unset.
func (t TierSpec) laneWait() time.Duration {
	if t.LaneWait > 0 {
		return t.LaneWait
	}
	return 24 * time.Hour
}

// models applies the defaults to every model and checks that each name
// in use is configured; it returns a copy, so the caller's map is not
// written to.
func models(in map[string]Model, use ...string) (map[string]Model, error) {
	out := make(map[string]Model, len(in))
	for name, m := range in {
		out[name] = m.withDefaults()
	}
	for _, name := range use {
		if _, ok := out[name]; !ok {
			return nil, fmt.Errorf("workers: model %q is not configured", name)
		}
	}
	return out, nil
}

// tokenizers returns a tokenizer per model.
func tokenizers(ms map[string]Model) (map[string]*ratelimit.Tokenizer, error) {
	out := make(map[string]*ratelimit.Tokenizer, len(ms))
	for name := range ms {
		t, err := ratelimit.NewTokenizer(name)
		if err != nil {
			return nil, fmt.Errorf("workers: model %q: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

func logOrDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// errBackToAdmission marks a job that went back to admission: asynq
// holds it again and it is not a failure.
var errBackToAdmission = errors.New("workers: back to admission")

// RetryAfterError asks asynq to run the task again after a delay that
// is not a failure (GitHub's rate limits).
type RetryAfterError struct {
	After time.Duration
	Err   error
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("retry after %s: %v", e.After.Round(time.Millisecond), e.Err)
}
func (e *RetryAfterError) Unwrap() error { return e.Err }

// IsFailure tells asynq which errors count against a task's retries.
func IsFailure(err error) bool {
	var ra *RetryAfterError
	return !errors.Is(err, errBackToAdmission) && !errors.As(err, &ra)
}

// RetryDelay is asynq's RetryDelayFunc: LLM jobs are held again (their
// ticket is back in admission); rate-limited GitHub writes wait as told;
// other jobs back off exponentially.
func RetryDelay(hold time.Duration) func(n int, err error, t *asynq.Task) time.Duration {
	return func(n int, err error, t *asynq.Task) time.Duration {
		if jobs.IsLLM(t.Type()) && !isRefusal(t.Type(), t.Payload()) {
			return hold
		}
		var ra *RetryAfterError
		if errors.As(err, &ra) {
			return ra.After
		}
		return min(time.Duration(1<<min(n, 10))*time.Second, 10*time.Minute)
	}
}

// TicketOf rebuilds an LLM task's admission ticket from its payload.
func TicketOf(typ string, payload []byte) (admission.Ticket, bool) {
	switch typ {
	case jobs.TypeSummary, jobs.TypeReview:
		var f jobs.File
		if jobs.Unmarshal(typ, payload, &f) != nil {
			return admission.Ticket{}, false
		}
		return fileTicket(f), true
	case jobs.TypeChat:
		var c jobs.Chat
		if jobs.Unmarshal(typ, payload, &c) != nil || c.Refusal {
			return admission.Ticket{}, false
		}
		return ChatTicket(c), true
	}
	return admission.Ticket{}, false
}

// isRefusal reports whether a task is a chat refusal: no LLM call, so
// it is never held for admission.
func isRefusal(typ string, payload []byte) bool {
	var c jobs.Chat
	return typ == jobs.TypeChat && jobs.Unmarshal(typ, payload, &c) == nil && c.Refusal
}

func fileTicket(f jobs.File) admission.Ticket {
	return admission.Ticket{ID: jobs.FileTaskID(f), Queue: f.Tier.Queue(), Model: f.Model, Class: string(f.Tier),
		Tenant: strconv.FormatInt(f.PR.Installation, 10), PRSeq: f.PRSeq, Index: f.Index, Total: f.Total, Tokens: f.Estimate, Output: splitOf(f.Estimate, f.EstimateOutput)}
}

// ChatTicket is a chat job's admission ticket.
func ChatTicket(c jobs.Chat) admission.Ticket {
	return admission.Ticket{ID: jobs.ChatTaskID(c), Queue: jobs.QueueChat, Model: c.Model, Class: admission.ClassChat,
		Tenant: strconv.FormatInt(c.PR.Installation, 10), Tokens: c.Estimate, Output: splitOf(c.Estimate, c.EstimateOutput)}
}

// splitOf is a ticket's output part: the payload's, when it is a part of
// the estimate; else 0 (not split: admission charges the whole estimate
// to each of the input and output limits).
func splitOf(estimate, output int64) int64 {
	if output <= 0 || output > estimate {
		return 0
	}
	return output
}

// backToAdmission puts an LLM job's ticket back, at once or after delay,
// and returns the error that tells asynq to hold the task again.
func backToAdmission(ctx context.Context, rq Requeue, t admission.Ticket, delay time.Duration, cause error) error {
	var err error
	if delay > 0 {
		err = rq.RegisterAt(ctx, t, time.Now().Add(delay))
	} else {
		_, err = rq.Register(ctx, t)
	}
	if err != nil {
		return fmt.Errorf("%w (and re-registering failed: %v)", cause, err)
	}
	return fmt.Errorf("%w: %v", errBackToAdmission, cause)
}

// started records that an admitted job reached its handler. A failure
// is logged, not returned: the job can run, and the reconciler only
// finds the ticket still released and releases the task again, which
// asynq refuses for a running task.
func started(ctx context.Context, l Ledger, log *slog.Logger, t admission.Ticket) {
	if err := l.Started(ctx, t.Model, t.ID); err != nil {
		log.WarnContext(ctx, "could not record the job's start in admission; the reconciler may release it again", "task", t.ID, "model", t.Model, "err", err)
	}
}

// settle replaces an admitted job's estimate with what it used. A job
// holding no reservation (a retry settled already, a baseline without a
// bucket) is fine; another failure is logged: the bucket keeps the
// estimate until the reservation expires, so admission is cautious,
// never over the limit.
func settle(ctx context.Context, l Ledger, log *slog.Logger, t admission.Ticket, cost ratelimit.Cost) {
	err := l.Settle(ctx, t.Model, t.ID, cost)
	switch {
	case err == nil:
	case errors.Is(err, ratelimit.ErrNotReserved):
		log.DebugContext(ctx, "nothing to settle in admission", "task", t.ID, "model", t.Model)
	default:
		log.WarnContext(ctx, "could not settle the job's use in admission; the bucket keeps its estimate until the reservation expires", "task", t.ID, "model", t.Model, "err", err)
	}
}

// enqueueFinalize enqueues a head's finalize job, once.
func enqueueFinalize(ctx context.Context, q TaskQueue, f jobs.Finalize) error {
	_, err := enqueueFinalizeNew(ctx, q, f)
	return err
}

// enqueueFinalizeNew enqueues a head's finalize job and reports whether
// it was created (false: a job with its id exists already).
func enqueueFinalizeNew(ctx context.Context, q TaskQueue, f jobs.Finalize) (bool, error) {
	_, err := q.EnqueueContext(ctx, asynq.NewTask(jobs.TypeFinalize, jobs.Marshal(f)),
		asynq.TaskID(jobs.FinalizeTaskID(f)), asynq.Queue(f.Tier.Queue()), asynq.MaxRetry(20), asynq.Timeout(5*time.Minute))
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("workers: enqueue finalize: %w", err)
	}
	return true, nil
}

func retried(ctx context.Context) int  { n, _ := asynq.GetRetryCount(ctx); return n }
func maxRetry(ctx context.Context) int { n, _ := asynq.GetMaxRetry(ctx); return n }

func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}
