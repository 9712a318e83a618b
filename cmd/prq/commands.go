package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// setup parses a running command's flags and configuration.
func setup(env *cmdEnv, name, usage string, m mode, args []string, extra func(*flag.FlagSet)) (*Config, bool, error) {
	fs := newFlagSet(env, name, usage)
	var fl flags
	fl.register(fs)
	if extra != nil {
		extra(fs)
	}
	if help, err := parseFlags(fs, args); help || err != nil {
		return nil, help, err
	}
	cfg, err := loadConfig(env.getenv, &fl)
	if err != nil {
		return nil, false, err
	}
	if err := cfg.validate(m); err != nil {
		return nil, false, fmt.Errorf("invalid configuration:\n  %s", indent(err.Error()))
	}
	return cfg, false, nil
}

func indent(s string) string {
	out := []byte{}
	for i := 0; i < len(s); i++ {
		out = append(out, s[i])
		if s[i] == '\n' {
			out = append(out, ' ', ' ')
		}
	}
	return string(out)
}

// running describes what a process runs.
type running struct {
	http   bool
	worker bool
}

// runProcess runs serve, worker or both until ctx ends, then shuts down
// in order: stop taking HTTP requests, stop admitting, let in-flight jobs
// finish (asynq Shutdown, bounded by the shutdown timeout), close Redis.
func runProcess(ctx context.Context, env *cmdEnv, cfg *Config, what running, prepare func(*app) error) error {
	log := newLogger(env.stderr, cfg.Log)
	conn, err := parseRedisURL(cfg.RedisURL)
	if err != nil {
		return &settingErr{name: "REDIS_URL", problem: err.Error()}
	}
	a, err := newApp(ctx, cfg, log, conn)
	if err != nil {
		return err
	}
	defer a.close()
	return a.run(ctx, env, what, prepare)
}

func (a *app) run(ctx context.Context, env *cmdEnv, what running, prepare func(*app) error) error {
	cfg, log := a.cfg, a.log
	if what.worker {
		if err := a.buildWorkers(nil); err != nil {
			return err
		}
	}
	if prepare != nil {
		if err := prepare(a); err != nil {
			return err
		}
	}
	var waitHTTP func() error
	if what.http {
		if cfg.Admin.Token == "" && !a.demo && !isLoopback(cfg.Addr) {
			return &settingErr{name: "PRQ_ADMIN_TOKEN", problem: fmt.Sprintf("is required to expose the dashboard, admin API and asynq web UI on %s; set it, or bind to loopback (--addr 127.0.0.1:8080)", cfg.Addr)}
		}
		ln, err := net.Listen("tcp", cfg.Addr)
		if err != nil {
			return &settingErr{name: "PRQ_ADDR", problem: err.Error()}
		}
		a.addr.Store(hostPort(ln.Addr()))
		var wh http.Handler
		if cfg.GitHub.WebhookSecret != "" {
			h, err := a.webhookHandler()
			if err != nil {
				return err
			}
			wh = h
		}
		a.sampler = newSampler(a)
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go a.sampler.run(sctx, time.Second)
		h, closeMon := a.handler(wh, tokenAuth(string(cfg.Admin.Token), a.demo))
		defer closeMon()
		waitHTTP = serveHTTP(ctx, ln, h, log)
		log.InfoContext(ctx, "serving", "addr", ln.Addr().String(), "webhook", wh != nil)
		fmt.Fprintf(env.stdout, "prq: dashboard http://%s/  asynq web UI http://%s/monitoring/  metrics http://%s/metrics\n", hostPort(ln.Addr()), hostPort(ln.Addr()), hostPort(ln.Addr()))
	}
	var stopWorker func()
	if what.worker {
		stop, err := a.startWorker(ctx)
		if err != nil {
			return err
		}
		stopWorker = stop
		log.InfoContext(ctx, "worker started", "concurrency", cfg.Worker.Concurrency, "models", a.sched.Models())
	}
	<-ctx.Done()
	log.Info("shutting down")
	var err error
	if waitHTTP != nil {
		err = waitHTTP()
	}
	if stopWorker != nil {
		stopWorker()
	}
	log.Info("stopped")
	return err
}

func hostPort(a net.Addr) string {
	host, port, _ := net.SplitHostPort(a.String())
	if host == "::" || host == "0.0.0.0" || host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

func runServe(ctx context.Context, env *cmdEnv, args []string) error {
	cfg, help, err := setup(env, "serve", "Runs the webhook receiver, dashboard, asynq web UI, metrics and admin API.", modeServe, args, nil)
	if help || err != nil {
		return err
	}
	return runProcess(ctx, env, cfg, running{http: true}, nil)
}

func runWorker(ctx context.Context, env *cmdEnv, args []string) error {
	cfg, help, err := setup(env, "worker", "Runs jobs: admission, planning, summaries, reviews, chat and publishing. Scale by running more.", modeWorker, args, nil)
	if help || err != nil {
		return err
	}
	return runProcess(ctx, env, cfg, running{worker: true}, nil)
}

func runAll(ctx context.Context, env *cmdEnv, args []string) error {
	cfg, help, err := setup(env, "all", "Runs serve and worker in one process.", modeAll, args, nil)
	if help || err != nil {
		return err
	}
	return runProcess(ctx, env, cfg, running{http: true, worker: true}, nil)
}

func runPlan(ctx context.Context, env *cmdEnv, args []string) error {
	usage := "prq plan set <installation> <tier> [reason] | get <installation> | list"
	if len(args) == 0 {
		return &usageError{usage}
	}
	sub, rest := args[0], args[1:]
	fs := newFlagSet(env, "plan "+sub, usage)
	var fl flags
	fl.register(fs)
	if help, err := parseFlags(fs, rest); help || err != nil {
		return err
	}
	cfg, err := loadConfig(env.getenv, &fl)
	if err != nil {
		return err
	}
	if cfg.RedisURL == "" {
		return &settingErr{name: "REDIS_URL", problem: "is required"}
	}
	conn, err := parseRedisURL(cfg.RedisURL)
	if err != nil {
		return &settingErr{name: "REDIS_URL", problem: err.Error()}
	}
	log := newLogger(env.stderr, cfg.Log)
	rdb, err := openRedis(ctx, conn, true, log)
	if err != nil {
		return err
	}
	defer rdb.Close()
	def, _ := jobs.ParseTier(cfg.DefaultTier)
	st := store.New(rdb, def)
	pos := fs.Args()
	enc := json.NewEncoder(env.stdout)
	enc.SetIndent("", "  ")
	switch sub {
	case "set":
		if len(pos) < 2 {
			return &usageError{usage}
		}
		id, err := strconv.ParseInt(pos[0], 10, 64)
		if err != nil || id <= 0 {
			return &usageError{"installation must be a positive integer"}
		}
		tier, err := jobs.ParseTier(pos[1])
		if err != nil {
			return &usageError{err.Error()}
		}
		reason := ""
		if len(pos) > 2 {
			reason = pos[2]
		}
		if err := st.UpdatePlan(ctx, id, func(p *store.Plan) { p.Tier, p.Reason, p.Explicit = tier, reason, true }); err != nil {
			return err
		}
		p, _ := st.GetPlan(ctx, id)
		return enc.Encode(p)
	case "get":
		if len(pos) != 1 {
			return &usageError{usage}
		}
		id, err := strconv.ParseInt(pos[0], 10, 64)
		if err != nil || id <= 0 {
			return &usageError{"installation must be a positive integer"}
		}
		p, err := st.GetPlan(ctx, id)
		if err != nil {
			return err
		}
		return enc.Encode(p)
	case "list":
		ps, err := st.ListPlans(ctx)
		if err != nil {
			return err
		}
		return enc.Encode(ps)
	}
	return &usageError{usage}
}
