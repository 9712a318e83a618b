// Package workers runs prq's jobs: planning a PR into per-file jobs,
// summarising and reviewing files with the LLM, answering chat, and
// publishing results to GitHub exactly once. LLM jobs start only when
// admitted (package admission) and return to admission, never around it,
// when they must run again. It does not receive webhooks or decide order.
package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
)

// GitHub is what the workers call on GitHub, per installation.
type GitHub interface {
	PR(ctx context.Context, owner, repo string, n int) (ghapp.PullRequest, error)
	Files(ctx context.Context, owner, repo string, n int) ([]ghapp.File, error)
	Compare(ctx context.Context, owner, repo, base, head string) ([]ghapp.File, error)
	UpsertComment(ctx context.Context, owner, repo string, n int, knownID int64, marker, body string) (int64, error)
	CreateReview(ctx context.Context, owner, repo string, n int, commit, body string, comments []ghapp.ReviewComment) (int64, error)
	HasReview(ctx context.Context, owner, repo string, n int, marker string) (int64, error)
	Reply(ctx context.Context, owner, repo string, n int, commentID int64, body string) (int64, error)
	Comment(ctx context.Context, owner, repo string, n int, body string) (int64, error)
}

// Admitter is how LLM jobs are submitted, admitted and settled:
// prq's admission scheduler, or a benchmark baseline.
type Admitter interface {
	Submit(ctx context.Context, task *asynq.Task, t admission.Ticket, opts ...asynq.Option) (bool, error)
	Register(ctx context.Context, t admission.Ticket) (bool, error)
	RegisterAt(ctx context.Context, t admission.Ticket, at time.Time) error
	Started(ctx context.Context, model, id string) error
	Settle(ctx context.Context, model, id string, actual ratelimit.Cost) error
	Cancel(ctx context.Context, model, id string) (bool, error)
	DeleteTask(queue, id string)
	Pause(ctx context.Context, model, reason string, d time.Duration) error
	Bucket(model string) (*ratelimit.Bucket, bool)
	Models() []string
}

var _ Admitter = (*admission.Scheduler)(nil)

// GitHubApp hands out an installation's GitHub client.
type GitHubApp interface {
	Client(installation int64) (*ghapp.Client, error)
}

// LLM makes one chat call.
type LLM interface {
	Complete(ctx context.Context, r llm.Request) (llm.Response, error)
}

// Model is what the workers need to know of a model.
type Model struct {
	Name          string
	MaxOutput     int64 // requested output cap. Defaults to 1024.
	ContextTokens int64 // Defaults to 128000.
	Reasoning     bool
}

// TierSpec is a tier's plan.
type TierSpec struct {
	Review      bool
	QuotaTokens int64 // per quota period per installation; 0: unlimited
}

// Config configures the workers.
type Config struct {
	Models map[string]Model
	// SummaryModel, ReviewModel and ChatModel pick the model of each kind.
	SummaryModel, ReviewModel, ChatModel string
	Tiers                                map[jobs.Tier]TierSpec
	// QuotaPerKind splits each installation's quota per job kind.
	QuotaPerKind bool
	// Exclude are path globs never reviewed.
	Exclude []string
	// SkipBotPRs skips PRs opened by bots. Defaults to false here; the
	// command sets it from configuration (default true).
	SkipBotPRs bool
	// Backoff is the first retry delay of a transient failure; it doubles.
	// Defaults to 2s.
	Backoff time.Duration
	// PauseFor is how long an account problem pauses a model. Defaults to 5m.
	PauseFor time.Duration
	// Hold is the far-future delay of held tasks. Defaults to ten years.
	Hold time.Duration
	// Gate, when set, runs before every LLM call and may delay or refuse
	// it (the benchmark's baselines; prq itself gates by admission).
	Gate func(ctx context.Context, t admission.Ticket) error
}

// Workers holds the job handlers' dependencies.
type Workers struct {
	cfg    Config
	store  *store.Store
	sched  Admitter
	gh     GitHubApp
	llm    LLM
	quota  *ratelimit.Quota
	pacer  *Pacer
	client *asynq.Client
	log    *slog.Logger
	tok    map[string]*ratelimit.Tokenizer

	running atomic.Int64
	// Calls counts LLM calls by outcome, for metrics.
	Calls func(model, outcome string)
}

// New returns the workers.
func New(cfg Config, st *store.Store, sched Admitter, gh GitHubApp, model LLM, quota *ratelimit.Quota, pacer *Pacer, client *asynq.Client, log *slog.Logger) (*Workers, error) {
	for _, name := range []string{cfg.SummaryModel, cfg.ReviewModel, cfg.ChatModel} {
		m, ok := cfg.Models[name]
		if !ok {
			return nil, fmt.Errorf("workers: model %q is not configured", name)
		}
		if m.MaxOutput == 0 {
			m.MaxOutput = 1024
		}
		if m.ContextTokens == 0 {
			m.ContextTokens = 128000
		}
		cfg.Models[name] = m
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = 2 * time.Second
	}
	if cfg.PauseFor == 0 {
		cfg.PauseFor = 5 * time.Minute
	}
	if cfg.Hold == 0 {
		cfg.Hold = 10 * 365 * 24 * time.Hour
	}
	w := &Workers{cfg: cfg, store: st, sched: sched, gh: gh, llm: model, quota: quota, pacer: pacer, client: client, log: log, tok: map[string]*ratelimit.Tokenizer{}}
	for name := range cfg.Models {
		t, err := ratelimit.NewTokenizer(name)
		if err != nil {
			return nil, err
		}
		w.tok[name] = t
	}
	return w, nil
}

// Running returns how many jobs this process runs now.
func (w *Workers) Running() int { return int(w.running.Load()) }

// Mux returns the handlers of every task type.
func (w *Workers) Mux() *asynq.ServeMux {
	mux := asynq.NewServeMux()
	mux.Use(w.track)
	mux.HandleFunc(jobs.TypePlan, w.plan)
	mux.HandleFunc(jobs.TypeSummary, w.file)
	mux.HandleFunc(jobs.TypeReview, w.file)
	mux.HandleFunc(jobs.TypeFinalize, w.finalize)
	mux.HandleFunc(jobs.TypeChat, w.chat)
	return mux
}

func (w *Workers) track(h asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		w.running.Add(1)
		defer w.running.Add(-1)
		return h.ProcessTask(ctx, t)
	})
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
		if jobs.IsLLM(t.Type()) {
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
		if jobs.Unmarshal(typ, payload, &c) != nil {
			return admission.Ticket{}, false
		}
		return ChatTicket(c), true
	}
	return admission.Ticket{}, false
}

func fileTicket(f jobs.File) admission.Ticket {
	return admission.Ticket{ID: jobs.FileTaskID(f), Queue: f.Tier.Queue(), Model: f.Model, Class: string(f.Tier),
		Tenant: strconv.FormatInt(f.PR.Installation, 10), PRSeq: f.PRSeq, Index: f.Index, Total: f.Total, Tokens: f.Estimate}
}

// ChatTicket is a chat job's admission ticket.
func ChatTicket(c jobs.Chat) admission.Ticket {
	return admission.Ticket{ID: jobs.ChatTaskID(c), Queue: jobs.QueueChat, Model: c.Model, Class: admission.ClassChat,
		Tenant: strconv.FormatInt(c.PR.Installation, 10), Tokens: c.Estimate}
}

// backToAdmission puts an LLM job's ticket back, at once or after delay.
func (w *Workers) backToAdmission(ctx context.Context, t admission.Ticket, delay time.Duration, cause error) error {
	var err error
	if delay > 0 {
		err = w.sched.RegisterAt(ctx, t, time.Now().Add(delay))
	} else {
		_, err = w.sched.Register(ctx, t)
	}
	if err != nil {
		return fmt.Errorf("%w (and re-registering failed: %v)", cause, err)
	}
	return fmt.Errorf("%w: %v", errBackToAdmission, cause)
}
