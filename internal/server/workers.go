package server

import (
	"errors"
	"net/http"
	"os"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/metrics"
	"github.com/prq-dev/prq/internal/render"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/webhook"
	"github.com/prq-dev/prq/workers"
)

// jobSide is what the rest of the wiring needs of the job handlers; only
// buildWorkers knows the workers package's constructors.
type jobSide struct {
	handler    asynq.Handler
	running    func() int
	enqueuer   webhook.Queue
	ticketOf   func(*asynq.TaskInfo) (admission.Ticket, bool)
	retryDelay asynq.RetryDelayFunc
	isFailure  func(error) bool
}

// buildWorkers builds the enqueuer the webhook hands work to and, for a
// worker (handlers true), the job handlers, which need the GitHub App
// and provider credentials; serve alone builds no handlers.
func (s *Server) buildWorkers(tr http.RoundTripper, opt Options, handlers bool) (*jobSide, error) {
	cfg := s.cfg
	var adm workers.Admitter = s.sched
	if opt.Admitter != nil {
		adm = opt.Admitter
	}
	models := map[string]workers.Model{}
	for _, m := range cfg.Models {
		models[m.Name] = workers.Model{Name: m.Name, MaxOutput: m.MaxOutputTokens, ContextTokens: m.ContextTokens, Reasoning: m.Reasoning,
			Output: llm.FormatType(m.OutputFormat)}
	}
	enq, err := workers.NewEnqueuer(workers.EnqueuerConfig{Queue: s.client, Tickets: adm, Store: s.store,
		ChatModel: models[cfg.Jobs.ChatModel], Log: s.log.With("component", "webhook")})
	if err != nil {
		return nil, err
	}
	js := &jobSide{
		enqueuer:   enq,
		ticketOf:   func(ti *asynq.TaskInfo) (admission.Ticket, bool) { return workers.TicketOf(ti.Type, ti.Payload) },
		retryDelay: workers.RetryDelay(jobs.Hold),
		isFailure:  workers.IsFailure,
	}
	if !handlers {
		return js, nil
	}
	key := []byte(cfg.GitHub.PrivateKey)
	if len(key) == 0 && cfg.GitHub.PrivateKeyPath != "" {
		if key, err = os.ReadFile(cfg.GitHub.PrivateKeyPath); err != nil {
			return nil, &config.SettingError{Name: "GITHUB_PRIVATE_KEY_PATH", Problem: err.Error()}
		}
	}
	var gh workers.GitHubApp
	if len(key) > 0 && cfg.GitHub.AppID > 0 {
		if tr == nil {
			tr = http.DefaultTransport
		}
		// every process's GitHub requests are counted in Redis for serve's /metrics
		app, err := ghapp.New(cfg.GitHub.AppID, key, cfg.GitHub.APIURL, metrics.GitHubCounter{Counts: s.rdb, Next: tr})
		if err != nil {
			return nil, &config.SettingError{Name: "GITHUB_PRIVATE_KEY", Problem: err.Error()}
		}
		app.SetBot(cfg.GitHub.AppSlug)
		gh = app
	} else {
		gh = missingApp{}
	}
	tiers := map[jobs.Tier]workers.TierSpec{}
	for name, t := range cfg.Tiers {
		tiers[jobs.Tier(name)] = workers.TierSpec{Review: t.Review == nil || *t.Review, QuotaTokens: t.QuotaTokens, ChatQuotaTokens: t.ChatQuotaTokens}
	}
	period, _ := ratelimit.ParsePeriod(cfg.Quota.Period)
	quota, err := ratelimit.NewQuota(s.rdb, ratelimit.QuotaConfig{Period: period})
	if err != nil {
		return nil, err
	}
	router, err := buildLLM(cfg)
	if err != nil {
		return nil, err
	}
	var client workers.LLM = router
	if opt.WrapLLM != nil {
		client = opt.WrapLLM(client)
	}
	log := s.log.With("component", "worker")
	pacer := workers.NewPacer(s.rdb, log)
	pacer.Gap = cfg.GitHub.WriteGap.D()
	w, err := workers.New(workers.Config{
		Models: models, SummaryModel: cfg.Jobs.SummaryModel, ReviewModel: cfg.Jobs.ReviewModel, ChatModel: cfg.Jobs.ChatModel,
		Tiers: tiers, QuotaPerKind: cfg.Quota.PerKind, Exclude: cfg.Filters.Exclude, SkipBotPRs: cfg.GitHub.SkipBotPRs == nil || *cfg.GitHub.SkipBotPRs,
		Gate: opt.Gate, CountFunc: s.metrics.CountCall, UnusableFunc: s.metrics.CountUnusable,
		Markers: render.NewMarkers([]byte(cfg.GitHub.WebhookSecret)), MaxReviewParts: cfg.GitHub.MaxReviewParts,
		NoCheckRuns: cfg.GitHub.CheckRuns != nil && !*cfg.GitHub.CheckRuns, WebURL: cfg.GitHub.WebURL,
		BatchBudget: workers.RetryBudget{MaxAttempts: cfg.Retry.Batch.MaxAttempts, MaxAge: cfg.Retry.Batch.MaxAge.D()},
		ChatBudget:  workers.RetryBudget{MaxAttempts: cfg.Retry.Chat.MaxAttempts, MaxAge: cfg.Retry.Chat.MaxAge.D()},
		GaveUpFunc:  s.metrics.CountGaveUp,
	}, workers.Deps{Store: s.store, Admitter: adm, GitHub: gh, LLM: client, Quota: quota, Pacer: pacer, Attempts: workers.NewAttempts(s.rdb),
		Queue: s.client, Log: log})
	if err != nil {
		return nil, err
	}
	js.handler, js.running = w.Mux(), w.Running
	return js, nil
}

// missingApp stands where no GitHub App credentials are configured
// (serve only): jobs that need GitHub fail with a clear error.
type missingApp struct{}

func (missingApp) Client(int64) (*ghapp.Client, error) {
	return nil, errors.New("no GitHub App credentials: set GITHUB_APP_ID and GITHUB_PRIVATE_KEY_PATH")
}
