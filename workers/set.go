package workers

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/render"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
)

// Config holds the settings the handlers of a worker process share.
type Config struct {
	Models map[string]Model
	// SummaryModel, ReviewModel and ChatModel pick the model of each kind.
	SummaryModel, ReviewModel, ChatModel string
	Tiers                                map[jobs.Tier]TierSpec
	// QuotaPerKind splits each installation's quota per job kind.
	QuotaPerKind bool
	// QuotaSkip skips files whose tenant's quota is spent instead of
	// waiting for its reset (see CallerConfig.QuotaSkip).
	QuotaSkip bool
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
	// Gate, when set, runs before every LLM call and may delay or refuse
	// it (the benchmark's baselines; prq itself gates by admission).
	Gate func(ctx context.Context, t admission.Ticket) error
	// CountFunc, when set, counts LLM calls by model and outcome (metrics).
	CountFunc func(model, outcome string)
	// CostFunc, when set, adds up what priced calls cost (see
	// CallerConfig.CostFunc).
	CostFunc func(model, tier, lane string, installation int64, dollars float64)
	// UnusableFunc, when set, counts model replies that could not be read.
	UnusableFunc func(model, kind string)
	// IgnoredFunc, when set, counts the fields of readable model replies
	// that prq ignored.
	IgnoredFunc func(model, kind string, fields []string)
	// BatchBudget bounds the retries of plan, file and finalize jobs;
	// ChatBudget those of chat replies. Default to DefaultBatchBudget and
	// DefaultChatBudget.
	BatchBudget, ChatBudget RetryBudget
	// GaveUpFunc, when set, counts jobs that spent their retry budget, by
	// job kind and reason (prq_jobs_gave_up_total).
	GaveUpFunc func(kind, reason string)
	// FallbackFunc, when set, counts summary and review jobs that moved
	// to a fallback model, by model and reason (prq_jobs_fallbacks_total).
	FallbackFunc func(from, to, reason string)
	// LifecycleFunc, when set, counts jobs dropped for their installation
	// (prq_lifecycle_total).
	LifecycleFunc func(event, reason string)
	// Markers make the keyed markers of prq's writes (key from the
	// webhook secret).
	Markers render.Markers
	// MaxReviewParts caps the calls one file's review may be split into.
	// Defaults to 20.
	MaxReviewParts int
	// ContextTokens is how many tokens of a pull request's diffs each of
	// its prompts carries for context (PlannerConfig.ContextTokens).
	ContextTokens int64
	// NoCheckRuns turns the check run per head off (it needs the App
	// permission checks: write).
	NoCheckRuns bool
	// NoRepoConfig ignores repositories' .prq.yaml files (see
	// PlannerConfig.RepoConfig).
	NoRepoConfig bool
	// SummaryCost shows each head's cost in its summary's footer.
	SummaryCost bool
	// AppSlug is the App's name, as people mention it.
	AppSlug string
	// NoReuse makes every file job pay for its prompt, even one answered
	// already (see FileWorkerConfig.Reuse).
	NoReuse bool
	// ReusedFunc, when set, counts results reused instead of bought.
	ReusedFunc func(model, kind string)
	// CheckRunEvery is the least time between two progress updates of a
	// head's check run. Defaults to 5s.
	CheckRunEvery time.Duration
	// DecorationErrorFunc, when set, counts failed check-run writes by
	// decoration kind and status (prq_github_decoration_errors_total).
	DecorationErrorFunc func(kind, status string)
	// WebURL is GitHub's web address for links. Defaults to https://github.com.
	WebURL string
	// GitLabURL is GitLab's web address for links. Defaults to https://gitlab.com.
	GitLabURL string
}

// Deps are what the handlers of a worker process share.
type Deps struct {
	Store    *store.Store
	Admitter Admitter
	GitHub   GitHubApp
	// GitLab hands out GitLab tenants' forges; nil: no GitLab.
	GitLab ForgeTenants
	LLM    LLM
	// Quota caps installations' tokens; nil: no quotas.
	Quota *ratelimit.Quota
	// BatchQuota is Quota for the batch lane's jobs, whose reservations
	// last while they wait for their batch. Defaults to Quota.
	BatchQuota *ratelimit.Quota
	// Batch is the batch lane; nil: none (a tier's lane batch then has
	// no model to use it).
	Batch *BatchLane
	Pacer *Pacer
	// Attempts counts jobs' runs for their retry budgets (an *Attempts).
	Attempts Attempter
	// Queue is the asynq client that enqueues finalize jobs.
	Queue TaskQueue
	Log   *slog.Logger
}

// Set is a worker process's handlers, one per job kind.
type Set struct {
	Planner   *Planner
	Files     *FileWorker
	Chat      *ChatResponder
	Finalizer *Finalizer
	Commands  *CommandRunner
	// Line shows waiting pull requests where they stand (run it:
	// QueueReporter.Run); nil when the Admitter tells no positions.
	Line *QueueReporter
	// Fallbacks moves the jobs waiting for a paused model to its
	// fallbacks (run it: FallbackMover.Run); nil when no model has
	// fallbacks.
	Fallbacks *FallbackMover
	// Batch submits the batch lane's jobs and brings their results back
	// (run it: BatchLane.Run); nil when no model has one.
	Batch *BatchLane
}

// New builds the five handlers from the shared settings and dependencies.
func New(cfg Config, d Deps) (*Set, error) {
	switch {
	case d.Store == nil:
		return nil, errors.New("workers: Store is required")
	case d.Admitter == nil:
		return nil, errors.New("workers: Admitter is required")
	case d.GitHub == nil:
		return nil, errors.New("workers: GitHub is required")
	case d.Pacer == nil:
		return nil, errors.New("workers: Pacer is required")
	case d.Attempts == nil:
		return nil, errors.New("workers: Attempts is required")
	}
	if _, err := models(cfg.Models, cfg.SummaryModel, cfg.ReviewModel, cfg.ChatModel); err != nil {
		return nil, err
	}
	gh := Installations{App: d.GitHub, GitLab: d.GitLab}
	// file jobs, by far the most, read the installation's state from a
	// cache: one uninstalled meanwhile has its runs cancelled, which
	// stops them too; the others (plan, chat, finalize) read it afresh
	fileInstalls := newInstallCache(d.Store, installsFor, time.Now)
	var quota, batchQuota Quota
	if d.Quota != nil {
		quota = d.Quota
	}
	if d.BatchQuota != nil {
		batchQuota = d.BatchQuota
	}
	caller, err := NewCaller(CallerConfig{LLM: d.LLM, Ledger: d.Admitter, Requeue: d.Admitter, Provider: d.Admitter, Quota: quota, BatchQuota: batchQuota,
		Tiers: cfg.Tiers, QuotaPerKind: cfg.QuotaPerKind, QuotaSkip: cfg.QuotaSkip, Backoff: cfg.Backoff, PauseFor: cfg.PauseFor,
		Gate: cfg.Gate, CountFunc: cfg.CountFunc, CostFunc: cfg.CostFunc, Log: d.Log})
	if err != nil {
		return nil, err
	}
	s := &Set{Batch: d.Batch}
	var checks *Checks
	var progress func(ctx context.Context, pr jobs.PR, head string)
	var quotaWait func(ctx context.Context, pr jobs.PR, head string, until time.Time)
	if !cfg.NoCheckRuns {
		if checks, err = NewChecks(ChecksConfig{GitHub: gh, Store: d.Store, Turns: d.Pacer, WebURL: cfg.WebURL, GitLabURL: cfg.GitLabURL, Every: cfg.CheckRunEvery,
			ErrorFunc: cfg.DecorationErrorFunc, Log: d.Log}); err != nil {
			return nil, err
		}
		progress, quotaWait = checks.Progress, checks.QuotaWait
	}
	if s.Planner, err = NewPlanner(PlannerConfig{Store: d.Store, Plans: d.Store, Tickets: d.Admitter, GitHub: gh, Queue: d.Queue,
		Models: cfg.Models, SummaryModel: cfg.SummaryModel, ReviewModel: cfg.ReviewModel, Tiers: cfg.Tiers,
		Exclude: cfg.Exclude, SkipBotPRs: cfg.SkipBotPRs, RepoConfig: !cfg.NoRepoConfig, Settings: d.Store, LastConfigs: d.Store, Controls: d.Store, Learnings: d.Store, AppSlug: cfg.AppSlug, MaxParts: cfg.MaxReviewParts, ContextTokens: cfg.ContextTokens, Checks: checks,
		Attempts: d.Attempts, Budget: cfg.BatchBudget, GaveUpFunc: cfg.GaveUpFunc, Installs: d.Store, LifecycleFunc: cfg.LifecycleFunc, Log: d.Log}); err != nil {
		return nil, err
	}
	var reuse ReuseStore
	if !cfg.NoReuse {
		reuse = d.Store
	}
	var paused func()
	if mw, ok := d.Admitter.(MoveWaiting); ok && hasFallbacks(cfg.Models) {
		if s.Fallbacks, err = NewFallbackMover(FallbackMoverConfig{Admission: mw, Attempts: d.Attempts, Models: cfg.Models, Budget: cfg.BatchBudget, FallbackFunc: cfg.FallbackFunc, Log: d.Log}); err != nil {
			return nil, err
		}
		paused = s.Fallbacks.Kick
	}
	if s.Files, err = NewFileWorker(FileWorkerConfig{Paused: paused, Store: d.Store, Reuse: reuse, ReusedFunc: cfg.ReusedFunc, Ledger: d.Admitter, Caller: caller, Queue: d.Queue,
		Models: cfg.Models, Repairs: d.Store, Requeue: d.Admitter, UnusableFunc: cfg.UnusableFunc, IgnoredFunc: cfg.IgnoredFunc, Progress: progress, QuotaWait: quotaWait,
		Attempts: d.Attempts, Budget: cfg.BatchBudget, GaveUpFunc: cfg.GaveUpFunc, FallbackFunc: cfg.FallbackFunc, Installs: fileInstalls, LifecycleFunc: cfg.LifecycleFunc,
		Batch: d.Batch, Tickets: d.Admitter, Log: d.Log}); err != nil {
		return nil, err
	}
	if s.Chat, err = NewChatResponder(ChatResponderConfig{Replies: d.Store, Drafts: d.Store, Ledger: d.Admitter, Requeue: d.Admitter,
		Caller: caller, GitHub: gh, Turns: d.Pacer, Models: cfg.Models, Markers: cfg.Markers, Backoff: cfg.Backoff,
		Attempts: d.Attempts, Budget: cfg.ChatBudget, GaveUpFunc: cfg.GaveUpFunc, Installs: d.Store, LifecycleFunc: cfg.LifecycleFunc, Log: d.Log}); err != nil {
		return nil, err
	}
	if pos, ok := d.Admitter.(Positions); ok {
		every := 6 * cfg.CheckRunEvery // a position changes slower than files finish; GitHub's writes are dear
		if every <= 0 {
			every = 30 * time.Second
		}
		if s.Line, err = NewQueueReporter(QueueReporterConfig{Store: d.Store, Positions: pos, Checks: checks, Every: every, Log: d.Log}); err != nil {
			return nil, err
		}
	}
	if s.Commands, err = NewCommandRunner(CommandRunnerConfig{Store: d.Store, GitHub: gh, Queue: d.Queue, Turns: d.Pacer, Line: s.Line,
		Markers: cfg.Markers, AppSlug: cfg.AppSlug, Planner: s.Planner, Learnings: d.Store, ErrorFunc: cfg.DecorationErrorFunc, Log: d.Log}); err != nil {
		return nil, err
	}
	if s.Finalizer, err = NewFinalizer(FinalizerConfig{Results: d.Store, Publications: d.Store, GitHub: gh, Turns: d.Pacer, ShowCost: cfg.SummaryCost,
		Markers: cfg.Markers, Checks: checks, Votes: d.Store, Attempts: d.Attempts, Budget: cfg.BatchBudget, GaveUpFunc: cfg.GaveUpFunc, Installs: d.Store, LifecycleFunc: cfg.LifecycleFunc, Log: d.Log}); err != nil {
		return nil, err
	}
	return s, nil
}

// Register registers each handler for its task types on mux.
func (s *Set) Register(mux *asynq.ServeMux) {
	mux.Handle(jobs.TypePlan, s.Planner)
	mux.Handle(jobs.TypeSummary, s.Files)
	mux.Handle(jobs.TypeReview, s.Files)
	mux.Handle(jobs.TypeFinalize, s.Finalizer)
	mux.Handle(jobs.TypeChat, s.Chat)
	mux.Handle(jobs.TypeCommand, s.Commands)
}

// Mux returns a mux with every handler registered.
func (s *Set) Mux() *asynq.ServeMux {
	mux := asynq.NewServeMux()
	s.Register(mux)
	return mux
}
