package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/webhook"
	"github.com/prq-dev/prq/workers"
)

// app is one prq process: what serve, worker, all and demo share.
type app struct {
	cfg     *Config
	log     *slog.Logger
	connOpt asynq.RedisConnOpt
	rdb     redis.UniversalClient
	store   *store.Store
	sched   *admission.Scheduler
	workers *workers.Workers
	client  *asynq.Client
	insp    *asynq.Inspector
	metrics *metrics
	sampler *sampler
	demo    bool
	addr    atomic.Value // the HTTP listener's address

	// Overrides for the benchmark's baselines; nil for prq itself.
	admitter    workers.Admitter
	gate        func(context.Context, admission.Ticket) error
	wrapLLM     func(workers.LLM) workers.LLM
	wrapHandler func(asynq.Handler) asynq.Handler
	retryDelay  asynq.RetryDelayFunc
	isFailure   func(error) bool
	noAdmission bool // do not run the admission loop
}

// listenAddr returns the address the HTTP server listens on.
func (a *app) listenAddr() string {
	v, _ := a.addr.Load().(string)
	return v
}

// newApp connects Redis and builds the shared components.
func newApp(ctx context.Context, cfg *Config, log *slog.Logger, connOpt asynq.RedisConnOpt) (*app, error) {
	rdb, err := openRedis(ctx, connOpt, cfg.AllowEviction, log)
	if err != nil {
		return nil, err
	}
	a := &app{cfg: cfg, log: log, connOpt: connOpt, rdb: rdb}
	ok := false
	defer func() {
		if !ok {
			a.close()
		}
	}()
	defTier, _ := jobs.ParseTier(cfg.DefaultTier)
	a.store = store.New(rdb, defTier)
	for _, p := range cfg.Plans {
		tier, _ := jobs.ParseTier(p.Tier)
		if err := a.store.SetPlan(ctx, store.Plan{Installation: p.Installation, Tier: tier, Reason: p.Reason, Explicit: true}); err != nil {
			return nil, err
		}
	}
	a.client = asynq.NewClientFromRedisClient(rdb)
	a.insp = asynq.NewInspectorFromRedisClient(rdb)
	buckets := map[string]*ratelimit.Bucket{}
	apiKey := string(cfg.OpenAI.APIKey)
	for _, m := range cfg.Models {
		l, err := m.limits()
		if err != nil {
			return nil, fmt.Errorf("model %s: %w", m.Name, err)
		}
		if buckets[m.Name], err = ratelimit.NewBucket(rdb, m.Name, apiKey, l); err != nil {
			return nil, err
		}
	}
	weights := map[jobs.Tier]int64{}
	for name, t := range cfg.Tiers {
		weights[jobs.Tier(name)] = t.Weight
	}
	a.sched, err = admission.New(rdb, buckets, a.client, a.insp, admission.Config{
		Strict: cfg.Scheduler.Mode == "strict", Weights: weights, ChatShare: *cfg.Scheduler.ChatShare, Aging: cfg.Scheduler.Aging.D(),
	}, log.With("component", "admission"))
	if err != nil {
		return nil, err
	}
	a.metrics = newMetrics(a)
	a.sched.Observe = a.metrics.observeAdmission
	ok = true
	return a, nil
}

// buildWorkers builds the job handlers (needs GitHub App and provider
// credentials; serve needs them too, to cancel work and estimate chat).
func (a *app) buildWorkers(tr http.RoundTripper) error {
	cfg := a.cfg
	key := []byte(cfg.GitHub.PrivateKey)
	if len(key) == 0 && cfg.GitHub.PrivateKeyPath != "" {
		var err error
		if key, err = os.ReadFile(cfg.GitHub.PrivateKeyPath); err != nil {
			return &settingErr{name: "GITHUB_PRIVATE_KEY_PATH", problem: err.Error()}
		}
	}
	var gh workers.GitHubApp
	if len(key) > 0 && cfg.GitHub.AppID > 0 {
		if tr == nil {
			tr = http.DefaultTransport
		}
		app, err := ghapp.New(cfg.GitHub.AppID, key, cfg.GitHub.APIURL, githubCounter{rdb: a.rdb, next: tr})
		if err != nil {
			return &settingErr{name: "GITHUB_PRIVATE_KEY", problem: err.Error()}
		}
		gh = app
	} else {
		gh = missingApp{}
	}
	models := map[string]workers.Model{}
	for _, m := range cfg.Models {
		models[m.Name] = workers.Model{Name: m.Name, MaxOutput: m.MaxOutputTokens, ContextTokens: m.ContextTokens, Reasoning: m.Reasoning}
	}
	tiers := map[jobs.Tier]workers.TierSpec{}
	for name, t := range cfg.Tiers {
		tiers[jobs.Tier(name)] = workers.TierSpec{Review: t.Review == nil || *t.Review, QuotaTokens: t.QuotaTokens}
	}
	period, _ := ratelimit.ParsePeriod(cfg.Quota.Period)
	quota, err := ratelimit.NewQuota(a.rdb, ratelimit.QuotaConfig{Period: period})
	if err != nil {
		return err
	}
	var client workers.LLM = llm.New(string(cfg.OpenAI.APIKey), cfg.OpenAI.BaseURL, cfg.OpenAI.Timeout.D(), nil)
	if a.wrapLLM != nil {
		client = a.wrapLLM(client)
	}
	pacer := workers.NewPacer(a.rdb)
	pacer.Gap = cfg.GitHub.WriteGap.D()
	var adm workers.Admitter = a.sched
	if a.admitter != nil {
		adm = a.admitter
	}
	a.workers, err = workers.New(workers.Config{
		Models: models, SummaryModel: cfg.Jobs.SummaryModel, ReviewModel: cfg.Jobs.ReviewModel, ChatModel: cfg.Jobs.ChatModel,
		Tiers: tiers, QuotaPerKind: cfg.Quota.PerKind, Exclude: cfg.Filters.Exclude, SkipBotPRs: cfg.GitHub.SkipBotPRs == nil || *cfg.GitHub.SkipBotPRs,
		Gate: a.gate,
	}, a.store, adm, gh, client, quota, pacer, a.client, a.log.With("component", "worker"))
	if err != nil {
		return err
	}
	a.workers.Calls = a.metrics.countCall
	return nil
}

// missingApp stands where no GitHub App credentials are configured
// (serve only): jobs that need GitHub fail with a clear error.
type missingApp struct{}

func (missingApp) Client(int64) (*ghapp.Client, error) {
	return nil, errors.New("no GitHub App credentials: set GITHUB_APP_ID and GITHUB_PRIVATE_KEY_PATH")
}

// capacity is how many more jobs this process can start: idle slots
// minus tasks already released and waiting in the queues.
func (a *app) capacity(concurrency int) func() int {
	var mu sync.Mutex
	var pending int64
	var at time.Time
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(at) > 10*time.Millisecond {
			pipe := a.rdb.Pipeline()
			cmds := make([]*redis.IntCmd, len(jobs.Queues))
			for i, q := range jobs.Queues {
				cmds[i] = pipe.LLen(context.Background(), "asynq:{"+q+"}:pending")
			}
			pipe.Exec(context.Background())
			pending = 0
			for _, c := range cmds {
				pending += c.Val()
			}
			at = time.Now()
		}
		free := concurrency - a.workers.Running() - int(pending)
		return max(free, 0)
	}
}

// startWorker starts the asynq server and the admission loop.
func (a *app) startWorker(ctx context.Context) (stop func(), err error) {
	hold := 10 * 365 * 24 * time.Hour
	retryDelay, isFailure := asynq.RetryDelayFunc(workers.RetryDelay(hold)), workers.IsFailure
	if a.retryDelay != nil {
		retryDelay, isFailure = a.retryDelay, a.isFailure
	}
	var handler asynq.Handler = a.workers.Mux()
	if a.wrapHandler != nil {
		handler = a.wrapHandler(handler)
	}
	srv := asynq.NewServerFromRedisClient(a.rdb, asynq.Config{
		Concurrency:       a.cfg.Worker.Concurrency,
		Queues:            map[string]int{jobs.QueueChat: 8, jobs.QueuePaid: 4, jobs.QueueTrial: 2, jobs.QueueFree: 1},
		StrictPriority:    true,
		TaskCheckInterval: 20 * time.Millisecond,
		ShutdownTimeout:   a.cfg.ShutdownTimeout.D(),
		RetryDelayFunc:    retryDelay,
		IsFailure:         isFailure,
		Logger:            asynqLogger{a.log.With("component", "asynq")},
		LogLevel:          asynq.WarnLevel,
		ErrorHandler: asynq.ErrorHandlerFunc(func(ctx context.Context, t *asynq.Task, err error) {
			if !isFailure(err) {
				a.log.DebugContext(ctx, "job rescheduled", "type", t.Type(), "reason", err)
				return
			}
			id, _ := asynq.GetTaskID(ctx)
			n, _ := asynq.GetRetryCount(ctx)
			a.log.WarnContext(ctx, "job failed", "type", t.Type(), "task", id, "retry", n, "err", err)
		}),
	})
	if err := srv.Start(handler); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if a.noAdmission {
			<-lctx.Done()
			return
		}
		a.sched.Run(lctx, admission.RunConfig{
			Capacity: a.capacity(a.cfg.Worker.Concurrency),
			Queues:   jobs.Queues,
			TicketOf: func(ti *asynq.TaskInfo) (admission.Ticket, bool) { return workers.TicketOf(ti.Type, ti.Payload) },
		})
	}()
	return func() {
		cancel() // stop admitting first, then let running jobs finish
		<-done
		srv.Shutdown()
	}, nil
}

// handler returns prq's HTTP routes.
func (a *app) handler(wh http.Handler, auth func(http.Handler) http.Handler) (http.Handler, func()) {
	mux := http.NewServeMux()
	if wh != nil {
		mux.Handle("POST /webhook", wh)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := a.rdb.Ping(ctx).Err(); err != nil {
			http.Error(w, "redis unavailable", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /metrics", a.metrics.handler())
	mon := asynqmon.New(asynqmon.Options{RootPath: "/monitoring", RedisConnOpt: a.connOpt, ReadOnly: a.cfg.Admin.ReadOnly})
	mux.Handle("/monitoring/", auth(mon))
	mux.Handle("/api/", auth(a.adminAPI()))
	mux.Handle("/", auth(a.dashboard()))
	return mux, func() { mon.Close() }
}

// tokenAuth requires the admin token (bearer or basic password) unless
// the demo runs; without a token, serve refuses non-loopback addresses.
func tokenAuth(token string, open bool) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		if open {
			return h
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			if _, pw, ok := r.BasicAuth(); ok {
				got = pw
			}
			if token == "" || !constEq(got, token) {
				w.Header().Set("WWW-Authenticate", `Basic realm="prq"`)
				http.Error(w, "authentication required (PRQ_ADMIN_TOKEN as a bearer token or basic-auth password)", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serveHTTP runs the HTTP server until ctx ends, then shuts it down.
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) (wait func() error) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second, WriteTimeout: 60 * time.Second}
	errc := make(chan error, 1)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
		close(errc)
	}()
	return func() error {
		select {
		case <-ctx.Done():
		case err := <-errc:
			if err != nil {
				return err
			}
		}
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}

func (a *app) close() {
	if a.client != nil {
		a.client.Close()
	}
	if a.rdb != nil {
		a.rdb.Close()
	}
}

func (a *app) webhookHandler() (*webhook.Handler, error) {
	h, err := webhook.New(webhook.Config{Secret: []byte(a.cfg.GitHub.WebhookSecret), MaxBytes: a.cfg.GitHub.WebhookMaxBytes,
		AppSlug: a.cfg.GitHub.AppSlug, SkipBotPRs: a.cfg.GitHub.SkipBotPRs == nil || *a.cfg.GitHub.SkipBotPRs},
		a.workers.Enqueuer(), a.store, a.log.With("component", "webhook"))
	if err != nil {
		return nil, err
	}
	h.Count = a.metrics.countDelivery
	return h, nil
}
