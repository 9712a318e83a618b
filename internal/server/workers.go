package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/gitlab"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/dispatch"
	"github.com/prq-dev/prq/internal/logging"
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
	handler  asynq.Handler
	enqueuer webhook.Queue
	ticketOf func(*asynq.TaskInfo) (admission.Ticket, bool)
	// moved returns where a rebuilt ticket's job waits now (a fallback
	// model's, once it moved).
	moved      func(context.Context, admission.Ticket) admission.Ticket
	retryDelay asynq.RetryDelayFunc
	isFailure  func(error) bool
	// runs reconciles pull-request runs until ctx ends (a worker's).
	runs func(ctx context.Context)
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
	kinds := map[string][]jobs.Kind{}
	for kind, name := range map[jobs.Kind]string{jobs.KindSummary: cfg.Jobs.SummaryModel, jobs.KindReview: cfg.Jobs.ReviewModel, jobs.KindChat: cfg.Jobs.ChatModel} {
		kinds[name] = append(kinds[name], kind)
	}
	for name, m := range s.models {
		models[name] = workers.Model{Model: m, Kinds: kinds[name]}
	}
	enq, err := workers.NewEnqueuer(workers.EnqueuerConfig{Queue: s.client, Tickets: adm, Store: s.store,
		ChatModel: models[cfg.Jobs.ChatModel], Log: s.log.With("component", "webhook")})
	if err != nil {
		return nil, err
	}
	attempts := workers.NewAttempts(s.rdb)
	js := &jobSide{
		enqueuer: enq,
		ticketOf: func(ti *asynq.TaskInfo) (admission.Ticket, bool) { return workers.TicketOf(ti.Type, ti.Payload) },
		moved: func(ctx context.Context, t admission.Ticket) admission.Ticket {
			return workers.MovedTicket(ctx, attempts, models, t)
		},
		retryDelay: workers.RetryDelay(jobs.Hold),
		isFailure:  workers.IsFailure,
	}
	if !handlers {
		return js, nil
	}
	gh, gl, err := s.forges(tr)
	if err != nil {
		return nil, err
	}
	tiers := map[jobs.Tier]workers.TierSpec{}
	for name, t := range cfg.Tiers {
		tiers[jobs.Tier(name)] = workers.TierSpec{Review: t.Review == nil || *t.Review, QuotaTokens: t.QuotaTokens, ChatQuotaTokens: t.ChatQuotaTokens, QuotaDollars: t.QuotaDollars,
			Flex: t.Lane == config.LaneFlex, Batch: t.Lane == config.LaneBatch, LaneWait: t.LaneWait.D()}
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
	lane, batchQuota, err := s.batchLane(router, tiers, period, s.log.With("component", "batch"))
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
	if n := cfg.GitHub.ChatWriteBurst; n != nil {
		pacer.ChatBurst = *n
	}
	w, err := workers.New(workers.Config{
		Models: models, SummaryModel: cfg.Jobs.SummaryModel, ReviewModel: cfg.Jobs.ReviewModel, ChatModel: cfg.Jobs.ChatModel,
		Tiers: tiers, QuotaPerKind: cfg.Quota.PerKind, QuotaSkip: cfg.Quota.WhenSpent == "skip", Exclude: cfg.Filters.Exclude, SkipBotPRs: cfg.GitHub.SkipBotPRs == nil || *cfg.GitHub.SkipBotPRs,
		Gate: opt.Gate, CountFunc: s.metrics.CountCall, CostFunc: s.metrics.CountCost, UnusableFunc: s.metrics.CountUnusable, IgnoredFunc: s.metrics.CountIgnored, ReusedFunc: s.metrics.CountReused, NoReuse: cfg.Jobs.ReuseResults != nil && !*cfg.Jobs.ReuseResults,
		Markers: render.NewMarkers([]byte(cfg.GitHub.WebhookSecret)), MaxReviewParts: cfg.GitHub.MaxReviewParts, ContextTokens: cfg.Jobs.ContextTokensOr(),
		NoCheckRuns: cfg.GitHub.CheckRuns != nil && !*cfg.GitHub.CheckRuns, NoRepoConfig: cfg.GitHub.RepoConfig != nil && !*cfg.GitHub.RepoConfig, SummaryCost: cfg.GitHub.SummaryCost, AppSlug: cfg.GitHub.AppSlug, CheckRunEvery: cfg.GitHub.CheckRunEvery.D(), WebURL: cfg.GitHub.WebURL, GitLabURL: cfg.GitLab.URL,
		BatchBudget: workers.RetryBudget{MaxAttempts: cfg.Retry.Batch.MaxAttempts, MaxAge: cfg.Retry.Batch.MaxAge.D()},
		ChatBudget:  workers.RetryBudget{MaxAttempts: cfg.Retry.Chat.MaxAttempts, MaxAge: cfg.Retry.Chat.MaxAge.D()},
		GaveUpFunc:  s.metrics.CountGaveUp, FallbackFunc: s.metrics.CountJobFallback, LifecycleFunc: s.metrics.CountLifecycle, DecorationErrorFunc: s.metrics.CountDecorationError,
	}, workers.Deps{Store: s.store, Admitter: adm, GitHub: gh, GitLab: gl, LLM: client, Quota: quota, BatchQuota: batchQuota, Batch: lane, Pacer: pacer, Attempts: attempts,
		Queue: s.client, Log: log})
	if err != nil {
		return nil, err
	}
	js.handler = w.Mux()
	rec, err := workers.NewRunReconciler(workers.RunReconcilerConfig{Store: s.store, Queue: s.client, CountFunc: s.metrics.CountLifecycle, Log: log})
	if err != nil {
		return nil, err
	}
	js.runs = func(ctx context.Context) {
		if w.Line != nil {
			go w.Line.Run(ctx)
		}
		if w.Fallbacks != nil {
			go w.Fallbacks.Run(ctx, fallbackEvery)
		}
		if w.Batch != nil {
			go w.Batch.Run(ctx)
		}
		go w.Finalizer.SweepVotes(ctx, voteSweepEvery)
		rec.Run(ctx, runReconcileEvery)
	}
	return js, nil
}

// batchLane builds the batch lane of the models with batch: true that a
// tier's lane uses (nil: none), and the quota its jobs reserve in, whose
// reservations last as long as a job may wait in the lane.
func (s *Server) batchLane(router *llm.Router, tiers map[jobs.Tier]workers.TierSpec, period ratelimit.Period, lg *slog.Logger) (*workers.BatchLane, *ratelimit.Quota, error) {
	cfg := s.cfg
	wait := time.Duration(0)
	for _, t := range tiers {
		if t.Batch {
			wait = max(wait, t.LaneWait, 24*time.Hour)
		}
	}
	if wait == 0 {
		return nil, nil, nil
	}
	batchers, queued := map[string]llm.Batcher{}, map[string]int64{}
	for _, m := range cfg.Models {
		if !m.Batch {
			continue
		}
		b, ok := router.Batcher(m.Name, 0)
		if !ok {
			return nil, nil, &config.SettingError{Name: "models." + m.Name + ".batch", Problem: "its provider's client has no batch API"}
		}
		batchers[m.Name], queued[m.Name] = b, m.BatchQueueTokens
	}
	lane, err := workers.NewBatchLane(workers.BatchLaneConfig{Redis: s.rdb, Batchers: batchers, Queue: s.client, Every: cfg.Batch.Every.D(), MaxItems: cfg.Batch.MaxRequests,
		QueueTokens: queued, CountFunc: s.metrics.CountCall, Log: lg})
	if err != nil {
		return nil, nil, err
	}
	// a reservation outlives the lane's wait and a poll's lag
	quota, err := ratelimit.NewQuota(s.rdb, ratelimit.QuotaConfig{Period: period, ReservationTTL: wait + time.Hour})
	if err != nil {
		return nil, nil, err
	}
	return lane, quota, nil
}

// fallbackEvery is how often a worker process moves the jobs waiting for
// a paused model to its fallbacks.
const fallbackEvery = 5 * time.Second

// runReconcileEvery is the run reconciler's period: it reads every run
// in progress, so less often than admission's reconciler.
const runReconcileEvery = 30 * time.Second

// forges builds the forges' clients: the GitHub App (missingApp without
// its credentials) and the GitLab tenants' (nil without tenants).
func (s *Server) forges(tr http.RoundTripper) (workers.GitHubApp, workers.ForgeTenants, error) {
	cfg := s.cfg
	key := []byte(cfg.GitHub.PrivateKey)
	if len(key) == 0 && cfg.GitHub.PrivateKeyPath != "" {
		var err error
		if key, err = os.ReadFile(cfg.GitHub.PrivateKeyPath); err != nil {
			return nil, nil, &config.SettingError{Name: "GITHUB_PRIVATE_KEY_PATH", Problem: err.Error()}
		}
	}
	var gh workers.GitHubApp
	if len(key) > 0 && cfg.GitHub.AppID > 0 {
		if tr == nil {
			tr = http.DefaultTransport
		}
		// every process's GitHub requests are counted in Redis for serve's /metrics
		app, err := ghapp.New(cfg.GitHub.AppID, key, cfg.GitHub.APIURL, metrics.GitHubCounter{Counts: s.metrics.Counts(), Next: tr})
		if err != nil {
			return nil, nil, &config.SettingError{Name: keySetting(cfg), Problem: err.Error()}
		}
		app.SetBot(cfg.GitHub.AppSlug)
		gh = app
	} else {
		gh = missingApp{}
	}
	if tr == nil {
		tr = http.DefaultTransport
	}
	// and its GitLab requests likewise
	gl, err := gitlabForges(cfg, metrics.GitLabCounter{Counts: s.metrics.Counts(), Next: tr})
	if err != nil {
		return nil, nil, err
	}
	return gh, gl, nil
}

// gitlabForges builds the GitLab tenants' clients (nil: no tenants).
func gitlabForges(cfg *config.Config, tr http.RoundTripper) (workers.ForgeTenants, error) {
	if len(cfg.GitLab.Tenants) == 0 {
		return nil, nil
	}
	gc := gitlab.Config{BaseURL: cfg.GitLab.URL, Transport: tr}
	for _, t := range cfg.GitLab.Tenants {
		gc.Tenants = append(gc.Tenants, gitlab.Tenant{ID: t.ID, Path: t.Path, Token: string(t.Token)})
	}
	ts, err := gitlab.New(gc)
	if err != nil {
		return nil, &config.SettingError{Name: "gitlab.tenants", Problem: err.Error()}
	}
	return gitlabTenants{ts}, nil
}

// gitlabTenants hands out a GitLab tenant's client as the workers' Forge.
type gitlabTenants struct{ ts *gitlab.Tenants }

func (g gitlabTenants) Forge(tenant int64) (workers.Forge, error) {
	c, err := g.ts.Client(tenant)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// voteSweepEvery is how often a worker claims the pull requests whose
// findings' reactions are due to be read (one sorted-set read when none
// is due).
const voteSweepEvery = 10 * time.Second

// missingApp stands where no GitHub App credentials are configured
// (serve only): jobs that need GitHub fail with a clear error.
type missingApp struct{}

func (missingApp) Client(int64) (*ghapp.Client, error) {
	return nil, errors.New("no GitHub App credentials: set GITHUB_APP_ID and GITHUB_PRIVATE_KEY_PATH")
}

// chatSlots is how many slots a worker process keeps for chat on top of
// its concurrency, so a reply never waits for a batch job to finish.
func chatSlots(concurrency int) int { return max(2, concurrency/10) }

// slots counts a worker process's free execution slots: the batch
// server's (which serves chat first, then the tiers) and the chat
// server's (chat only). Work released and still pending counts as taken.
type slots struct {
	rdb          redis.UniversalClient
	batch, chat  int          // the two servers' concurrency
	batchRunning atomic.Int64 // jobs running on the batch server
	chatRunning  atomic.Int64 // jobs running on the chat server
	mu           sync.Mutex
	at           time.Time
	pendingChat  int64
	pendingBatch int64
	process      *admission.Process // nil: not tracked
	gate         *dispatch.Gate     // queues known empty need no LLEN; nil: read them all
}

// pending reads the queues' pending lengths, at most every 10ms; a queue
// this process's dispatch gate knows empty counts 0 without a read.
func (sl *slots) pending() (chat, batch int64) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if time.Since(sl.at) > 10*time.Millisecond {
		ctx := context.Background()
		pipe := sl.rdb.Pipeline()
		cmds := make([]*redis.IntCmd, len(jobs.Queues))
		for i, q := range jobs.Queues {
			if sl.gate == nil || !sl.gate.Empty(q) {
				cmds[i] = pipe.LLen(ctx, "asynq:{"+q+"}:pending")
			}
		}
		if pipe.Len() > 0 {
			pipe.Exec(ctx)
		}
		sl.pendingChat, sl.pendingBatch = 0, 0
		for i, c := range cmds {
			if c == nil {
				continue
			}
			if jobs.Queues[i] == jobs.QueueChat {
				sl.pendingChat += c.Val()
			} else {
				sl.pendingBatch += c.Val()
			}
		}
		sl.at = time.Now()
	}
	return sl.pendingChat, sl.pendingBatch
}

// free returns the idle slots of each server.
func (sl *slots) free() (chat, batch int) {
	return sl.chat - int(sl.chatRunning.Load()), sl.batch - int(sl.batchRunning.Load())
}

// batchFree is how many more batch jobs may start: the batch server's
// idle slots less pending batch work and the pending chat the chat
// server cannot take.
func (sl *slots) batchFree() int {
	pc, pb := sl.pending()
	fc, fb := sl.free()
	return max(fb-int(pb)-max(int(pc)-fc, 0), 0)
}

// chatFree is how many more chat jobs may start: every idle slot less
// all pending work.
func (sl *slots) chatFree() int {
	pc, pb := sl.pending()
	fc, fb := sl.free()
	return max(fc+fb-int(pc)-int(pb), 0)
}

// startServers starts the batch server (concurrency slots, chat first,
// then the tiers) and the chat server (chatSlots, chat only); shutdown
// stops both, letting running jobs finish. With track, the process beats
// and records its running jobs (admission.Process), so if it dies they
// are put back within seconds.
func (s *Server) startServers(ctx context.Context, handler asynq.Handler, retryDelay asynq.RetryDelayFunc, isFailure func(error) bool, track bool) (*slots, func(), error) {
	sl := &slots{rdb: s.rdb, batch: s.cfg.Worker.Concurrency, chat: chatSlots(s.cfg.Worker.Concurrency), gate: s.gate}
	if track {
		host, _ := os.Hostname()
		var b [6]byte
		_, _ = rand.Read(b[:])
		sl.process = s.sched.Process(strings.NewReplacer("{", "", "}", "").Replace(host) + ":" + strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(b[:]))
		if err := sl.process.Beat(ctx); err != nil {
			return nil, nil, fmt.Errorf("start worker: %w", err)
		}
		handler = sl.process.Track(handler)
	}
	// each asynq server forwards its queues' due retries every
	// DelayedTaskCheckInterval (the chat server's queue is the batch
	// server's too: its own forwarder is a slow second) and deletes
	// completed tasks past their retention every JanitorInterval (up to
	// JanitorBatchSize a queue: 80 a second for five queues, a million
	// pull requests a day's plan tasks are 12)
	config := func(concurrency int, queues map[string]int, check, delayed time.Duration) asynq.Config {
		return asynq.Config{
			Concurrency:              concurrency,
			Queues:                   queues,
			StrictPriority:           true,
			TaskCheckInterval:        check,
			DelayedTaskCheckInterval: delayed,
			JanitorInterval:          30 * time.Second,
			JanitorBatchSize:         500,
			ShutdownTimeout:          s.cfg.ShutdownTimeout.D(),
			RetryDelayFunc:           retryDelay,
			IsFailure:                isFailure,
			Logger:                   logging.Asynq{Log: s.log},
			LogLevel:                 asynq.WarnLevel,
			ErrorHandler: asynq.ErrorHandlerFunc(func(ctx context.Context, t *asynq.Task, err error) {
				if !isFailure(err) {
					s.log.DebugContext(ctx, "job rescheduled", "type", t.Type(), "reason", err)
					return
				}
				id, _ := asynq.GetTaskID(ctx)
				n, _ := asynq.GetRetryCount(ctx)
				s.log.WarnContext(ctx, "job failed", "type", t.Type(), "task", id, "retry", n, "err", err)
			}),
		}
	}
	// idle queues are answered in-process until work is put on them, so
	// asynq's look between dequeues (half to one and a half times its
	// check interval after finding nothing) costs Redis nothing: short, a
	// released job starts within milliseconds. Without wakes each look
	// is a Redis call per queue: longer.
	check, chatCheck := 4*time.Millisecond, 4*time.Millisecond
	if err := s.gate.Listen(ctx); err != nil {
		s.log.Warn("no dispatch wakes: the worker's asynq servers poll Redis", "err", err)
		check, chatCheck = 20*time.Millisecond, 50*time.Millisecond
	}
	batch := asynq.NewServerFromRedisClient(s.rdb, config(sl.batch, jobs.QueuePriorities, check, 5*time.Second))
	err := batch.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		sl.batchRunning.Add(1)
		defer sl.batchRunning.Add(-1)
		return handler.ProcessTask(ctx, t)
	}))
	if err != nil {
		return nil, nil, fmt.Errorf("start worker: %w", err)
	}
	// the batch server takes chat first whenever it has a slot; the chat
	// server's slots are chat's when every batch slot is busy
	chat := asynq.NewServerFromRedisClient(s.rdb, config(sl.chat, map[string]int{jobs.QueueChat: 1}, chatCheck, time.Minute))
	err = chat.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		sl.chatRunning.Add(1)
		defer sl.chatRunning.Add(-1)
		return handler.ProcessTask(ctx, t)
	}))
	if err != nil {
		batch.Shutdown()
		return nil, nil, fmt.Errorf("start worker: chat server: %w", err)
	}
	return sl, func() {
		stopBeating := func() {}
		if sl.process != nil { // the admission loop has stopped beating: running jobs are still ours
			stopBeating = sl.process.KeepBeating(time.Second)
		}
		chat.Shutdown()
		batch.Shutdown()
		stopBeating()
		if sl.process != nil {
			if err := sl.process.Leave(context.WithoutCancel(ctx)); err != nil {
				s.log.Warn("could not remove this process's liveness record; others will find it silent and check its jobs", "err", err)
			}
		}
	}, nil
}

// keySetting names where the App's key came from, for an error about
// it: GITHUB_PRIVATE_KEY, else the file of GITHUB_PRIVATE_KEY_PATH.
func keySetting(cfg *config.Config) string {
	if cfg.GitHub.PrivateKey == "" {
		return "GITHUB_PRIVATE_KEY_PATH"
	}
	return "GITHUB_PRIVATE_KEY"
}
