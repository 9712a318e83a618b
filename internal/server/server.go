package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/dispatch"
	"github.com/prq-dev/prq/internal/logging"
	"github.com/prq-dev/prq/internal/metrics"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// Roles is what a process runs: serve (HTTP), worker, or both (all).
type Roles struct {
	HTTP   bool
	Worker bool
}

// Options change how the process runs jobs. Production passes the zero
// value; the benchmark sets them to run today's alternatives (its
// baselines) through the same wiring, and the demo opens the HTTP surface.
type Options struct {
	// Admitter replaces the admission scheduler where jobs are submitted.
	Admitter workers.Admitter
	// Gate runs before each LLM call (a baseline's limiter).
	Gate func(context.Context, admission.Ticket) error
	// WrapLLM wraps the provider client (to record calls).
	WrapLLM func(workers.LLM) workers.LLM
	// WrapHandler wraps the job handler (to count runs).
	WrapHandler func(asynq.Handler) asynq.Handler
	// RetryDelay and IsFailure replace asynq's retry policy; both or none.
	RetryDelay asynq.RetryDelayFunc
	IsFailure  func(error) bool
	// NoAdmission: do not run the admission loop.
	NoAdmission bool
	// OnAdmit is told of every admission this process makes (besides
	// the metrics), to record when each job was admitted.
	OnAdmit func(admission.Admitted)
	// Demo marks the dashboard as the demo's and, when no admin token is
	// set, serves the HTTP surface without auth (on loopback only, like
	// serve without a token).
	Demo bool
	// PRPages is where a page per pull request shows what was posted on
	// it (the demo's fake GitHub): the dashboard links its pull-request
	// rows to PRPages + "owner/repo/number". Empty: no links.
	PRPages string
}

// Server is one prq process: what serve, worker, all and the demo share.
type Server struct {
	cfg     *config.Config
	log     *slog.Logger
	connOpt asynq.RedisConnOpt
	rdb     redis.UniversalClient
	gate    *dispatch.Gate
	store   *store.Store
	sched   *admission.Scheduler
	client  *asynq.Client
	insp    *asynq.Inspector
	metrics *metrics.Metrics
	jobs    *jobSide
	models  map[string]llmcall.Model // the configured models, by name
	addr    atomic.Value             // the HTTP listener's address
	// gitlabHook receives GitLab's webhooks when GitLab tenants are
	// configured (nil: none).
	gitlabHook http.Handler
}

// RunProcess runs serve, worker or both until ctx ends (the commands
// serve, worker and all).
func RunProcess(ctx context.Context, cfg *config.Config, roles Roles, stdout, stderr io.Writer) error {
	log := logging.New(stderr, cfg.Log)
	conn, err := config.ParseRedisURL(cfg.RedisURL)
	if err != nil {
		return &config.SettingError{Name: "REDIS_URL", Problem: err.Error()}
	}
	s, err := New(ctx, cfg, log, conn)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Run(ctx, stdout, roles, Options{})
}

// New connects Redis and builds the shared components.
func New(ctx context.Context, cfg *config.Config, log *slog.Logger, connOpt asynq.RedisConnOpt) (*Server, error) {
	rdb, err := Open(ctx, connOpt, RedisChecks{AllowEviction: cfg.AllowEviction, AllowNoPersistence: cfg.AllowNoPersistence}, log)
	if err != nil {
		return nil, err
	}
	// every process announces the work it puts on a queue; a worker's
	// asynq servers skip their idle polls until such a wake (dispatch)
	gate := dispatch.New(rdb)
	rdb.AddHook(gate)
	s := &Server{cfg: cfg, log: log, connOpt: connOpt, rdb: rdb, gate: gate}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	defTier, _ := jobs.ParseTier(cfg.DefaultTier)
	s.store = store.New(rdb, defTier)
	s.store.RunTTL = cfg.Retention.D()
	for _, p := range cfg.Plans {
		tier, _ := jobs.ParseTier(p.Tier)
		if err := s.store.SetPlan(ctx, store.Plan{Installation: p.Installation, Tier: tier, Reason: p.Reason, Explicit: true}); err != nil {
			return nil, err
		}
	}
	for _, t := range cfg.GitLab.Tenants {
		id, _ := jobs.GitLabTenant(t.ID) // Validate has checked it
		if tier, err := jobs.ParseTier(t.Tier); err == nil {
			if err := s.store.SetPlan(ctx, store.Plan{Installation: id, Tier: tier, Reason: "gitlab.tenants " + t.Path, Explicit: true}); err != nil {
				return nil, err
			}
		}
	}
	s.client = asynq.NewClientFromRedisClient(rdb)
	s.insp = asynq.NewInspectorFromRedisClient(rdb)
	// every model, mapped once from the configuration for the workers'
	// and the gateway's wiring
	if s.models, err = llmcall.Models(cfg); err != nil {
		return nil, err
	}
	buckets := map[string]*ratelimit.Bucket{}
	for _, m := range cfg.Models {
		// a model's bucket is its provider keys' (the implicit provider's
		// is OPENAI_API_KEY, as before): one state per key, each with the
		// model's limits
		p, _ := cfg.ProviderOf(m.Name)
		if buckets[m.Name], err = ratelimit.NewKeyedBucket(rdb, m.Name, p.KeyValues(), *s.models[m.Name].Limits); err != nil {
			return nil, err
		}
		buckets[m.Name].Log = log // the window suspicion, limiter auto's switch
	}
	weights := map[jobs.Tier]int64{}
	for name, t := range cfg.Tiers {
		weights[jobs.Tier(name)] = t.Weight
	}
	var chatCap float64 // 0: admission's default
	if cfg.Scheduler.ChatCap != nil {
		chatCap = *cfg.Scheduler.ChatCap
	}
	sendLag := cfg.Scheduler.SendLag.D() // Validate: set, in [0, 10s]
	if sendLag == 0 {
		sendLag = -1 // admission: none
	}
	s.sched, err = admission.New(rdb, buckets, s.client, s.insp, admission.Config{
		Strict: cfg.Scheduler.Mode == "strict", Weights: weights, ChatShare: *cfg.Scheduler.ChatShare, ChatReserve: cfg.Scheduler.ChatReserve, ChatIdle: cfg.Scheduler.ChatIdle.D(), ChatModels: []string{cfg.Jobs.ChatModel}, ChatCap: chatCap, Aging: cfg.Scheduler.Aging.D(),
		SendLag: sendLag,
	}, log.With("component", "admission"))
	if err != nil {
		return nil, err
	}
	// every process must list a model's keys alike (admission records a
	// job's key by its index): refuse to start beside one that does not
	if err := s.sched.ClaimKeyOrder(ctx); err != nil {
		return nil, err
	}
	s.metrics = metrics.New(s.sched, s.insp, rdb, metrics.Config{CacheFor: cfg.Metrics.CacheFor.D()})
	s.metrics.Watch(rdb, cfg.Scheduler.Aging.D())
	s.metrics.WatchBudgets(cfg.Budgets())
	s.sched.Observe = s.metrics.ObserveAdmission
	ok = true
	return s, nil
}

// Close sends the deferred counters, then closes the asynq client and
// Redis.
func (s *Server) Close() {
	if s.metrics != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.metrics.Close(ctx); err != nil {
			s.log.Warn("could not send the last counts of LLM calls and forge requests", "err", err)
		}
		cancel()
	}
	if s.client != nil {
		s.client.Close()
	}
	if s.rdb != nil {
		s.rdb.Close()
	}
}

// ListenAddr returns the address the HTTP server listens on ("" until it
// listens).
func (s *Server) ListenAddr() string {
	v, _ := s.addr.Load().(string)
	return v
}

// Config returns the process's configuration.
func (s *Server) Config() *config.Config { return s.cfg }

// Store returns the run and plan store.
func (s *Server) Store() *store.Store { return s.store }

// Scheduler returns the admission scheduler.
func (s *Server) Scheduler() *admission.Scheduler { return s.sched }

// Client returns the asynq client.
func (s *Server) Client() *asynq.Client { return s.client }

// Inspector returns the asynq inspector.
func (s *Server) Inspector() *asynq.Inspector { return s.insp }

// Redis returns the process's Redis client.
func (s *Server) Redis() redis.UniversalClient { return s.rdb }

// Run runs the roles until ctx ends, then shuts down in order: stop
// taking HTTP requests, stop admitting, let in-flight jobs finish (asynq
// Shutdown, bounded by the shutdown timeout). The caller closes Redis
// (Close) afterwards. Run prints the URLs it serves to out.
func (s *Server) Run(ctx context.Context, out io.Writer, roles Roles, opt Options) error {
	cfg, log := s.cfg, s.log
	if opt.OnAdmit != nil {
		observe := s.sched.Observe
		s.sched.Observe = func(a admission.Admitted) {
			if observe != nil {
				observe(a)
			}
			opt.OnAdmit(a)
		}
	}
	js, err := s.buildWorkers(nil, opt, roles.Worker)
	if err != nil {
		return err
	}
	s.jobs = js
	var waitHTTP func() error
	if roles.HTTP {
		if problem := cfg.AdminTokenProblem(); problem != "" {
			return &config.SettingError{Name: "PRQ_ADMIN_TOKEN", Problem: problem}
		}
		ln, err := net.Listen("tcp", cfg.Addr)
		if err != nil {
			return &config.SettingError{Name: "PRQ_ADDR", Problem: err.Error()}
		}
		var wh http.Handler
		if cfg.GitHub.WebhookSecret != "" || len(cfg.GitLab.Tenants) > 0 {
			h, err := s.webhookHandler()
			if err != nil {
				ln.Close()
				return err
			}
			// GitLab's receiver shares its queue and limits; GitHub's
			// deliveries are taken only with GitHub's secret
			if cfg.GitHub.WebhookSecret != "" {
				wh = h
			}
		}
		hctx, cancel := context.WithCancel(ctx)
		defer cancel()
		// the demo without a token is open, and only on loopback (above)
		h, closeMon, err := s.handler(hctx, wh, opt.Demo && cfg.Admin.Token == "", opt.PRPages)
		if err != nil {
			ln.Close()
			return err
		}
		defer closeMon()
		s.addr.Store(hostPort(ln.Addr()))
		waitHTTP = serveHTTP(ctx, ln, h, log)
		log.InfoContext(ctx, "serving", "addr", ln.Addr().String(), "webhook", wh != nil, "dashboard", !cfg.Dashboard.Disabled)
		at := hostPort(ln.Addr())
		if cfg.Admin.Token == "" && !opt.Demo {
			// serve without a token: every admin surface answers 401, so
			// no URL of them is printed, only how to open them
			fmt.Fprintf(out, "prq: metrics http://%s/metrics; the dashboard, admin API and asynq web UI need PRQ_ADMIN_TOKEN (openssl rand -hex 32): set it, restart, and open http://%s/ with it as the password\n", at, at)
		} else if cfg.Dashboard.Disabled {
			fmt.Fprintf(out, "prq: asynq web UI http://%s/monitoring/  metrics http://%s/metrics\n", at, at)
		} else {
			fmt.Fprintf(out, "prq: dashboard http://%s/  asynq web UI http://%s/monitoring/  metrics http://%s/metrics\n", at, at, at)
		}
	}
	var stopWorker func()
	if roles.Worker {
		stop, err := s.startWorker(ctx, opt)
		if err != nil {
			return err
		}
		stopWorker = stop
		log.InfoContext(ctx, "worker started", "concurrency", cfg.Worker.Concurrency, "models", s.sched.Models())
	}
	<-ctx.Done()
	log.Info("shutting down")
	if waitHTTP != nil {
		err = waitHTTP()
	}
	if stopWorker != nil {
		stopWorker()
	}
	log.Info("stopped")
	return err
}

// startWorker starts the asynq server and the admission loop.
func (s *Server) startWorker(ctx context.Context, opt Options) (stop func(), err error) {
	retryDelay, isFailure := s.jobs.retryDelay, s.jobs.isFailure
	if opt.RetryDelay != nil {
		retryDelay, isFailure = opt.RetryDelay, opt.IsFailure
	}
	handler := s.jobs.handler
	if opt.WrapHandler != nil {
		handler = opt.WrapHandler(handler)
	}
	sl, shutdown, err := s.startServers(ctx, handler, retryDelay, isFailure, !opt.NoAdmission)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	runsDone := make(chan struct{})
	go func() {
		defer close(runsDone)
		if s.jobs.runs != nil {
			s.jobs.runs(lctx)
		}
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if opt.NoAdmission {
			<-lctx.Done()
			return
		}
		s.sched.Run(lctx, admission.RunConfig{
			Capacity:     sl.batchFree,
			ChatCapacity: sl.chatFree,
			Queues:       jobs.Queues,
			TicketOf:     s.jobs.ticketOf,
			Moved:        s.jobs.moved,
			Process:      sl.process,
		})
	}()
	return func() {
		cancel() // stop admitting first, then let running jobs finish
		<-done
		<-runsDone
		shutdown()
	}, nil
}
