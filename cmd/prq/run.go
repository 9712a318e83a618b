package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/bench"
	"github.com/prq-dev/prq/internal/chaos"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/demo"
	"github.com/prq-dev/prq/internal/harness"
	"github.com/prq-dev/prq/internal/logging"
	"github.com/prq-dev/prq/internal/server"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// setup parses a running command's flags and configuration.
func setup(env *cmdEnv, name, usage string, m config.Mode, args []string, extra func(*flag.FlagSet)) (*config.Config, bool, error) {
	fs := newFlagSet(env, name, usage)
	var fl config.Flags
	fl.Register(fs)
	if extra != nil {
		extra(fs)
	}
	if help, err := parseFlags(fs, args); help || err != nil {
		return nil, help, err
	}
	cfg, err := config.Load(env.getenv, &fl)
	if err != nil {
		return nil, false, err
	}
	if err := cfg.Validate(m); err != nil {
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

func runServe(ctx context.Context, env *cmdEnv, args []string) error {
	cfg, help, err := setup(env, "serve", "Runs the webhook receiver, dashboard, asynq web UI, metrics and admin API.", config.ModeServe, args, nil)
	if help || err != nil {
		return err
	}
	return server.RunProcess(ctx, cfg, server.Roles{HTTP: true}, env.stdout, env.stderr)
}

func runWorker(ctx context.Context, env *cmdEnv, args []string) error {
	cfg, help, err := setup(env, "worker", "Runs jobs: admission, planning, summaries, reviews, chat and publishing. Scale by running more.", config.ModeWorker, args, nil)
	if help || err != nil {
		return err
	}
	return server.RunProcess(ctx, cfg, server.Roles{Worker: true}, env.stdout, env.stderr)
}

func runAll(ctx context.Context, env *cmdEnv, args []string) error {
	cfg, help, err := setup(env, "all", "Runs serve and worker in one process.", config.ModeAll, args, nil)
	if help || err != nil {
		return err
	}
	return server.RunProcess(ctx, cfg, server.Roles{HTTP: true, Worker: true}, env.stdout, env.stderr)
}

func runDemo(ctx context.Context, env *cmdEnv, args []string) error {
	var d demo.Flags
	cfg, help, err := setup(env, "demo", demo.Usage, config.ModeDemo, args, d.Register)
	if help || err != nil {
		return err
	}
	return demo.Run(ctx, cfg, d, env.stdout, env.stderr)
}

func runBench(ctx context.Context, env *cmdEnv, args []string) error {
	var b bench.Flags
	cfg, help, err := setup(env, "bench", bench.Usage, config.ModeCheck, args, b.Register)
	if help || err != nil {
		return err
	}
	return bench.Run(ctx, cfg, b, env.stdout)
}

func runBenchWorker(ctx context.Context, env *cmdEnv, args []string) error {
	var w bench.WorkerFlags
	cfg, help, err := setup(env, "bench-worker", "A worker process of prq bench (internal).", config.ModeWorker, args, w.Register)
	if help || err != nil {
		return err
	}
	return bench.RunWorker(ctx, cfg, w, env.stdout, env.stderr)
}

func runChaos(ctx context.Context, env *cmdEnv, args []string) error {
	var c chaos.Flags
	_, help, err := setup(env, "chaos", chaos.Usage, config.ModeCheck, args, c.Register)
	if help || err != nil {
		return err
	}
	return chaos.Run(ctx, c, env.stdout)
}

func runPlan(ctx context.Context, env *cmdEnv, args []string) error {
	usage := "prq plan set <installation> <tier> [reason] | get <installation> | list"
	if len(args) == 0 {
		return &usageError{Msg: usage}
	}
	sub, rest := args[0], args[1:]
	fs := newFlagSet(env, "plan "+sub, usage)
	var fl config.Flags
	fl.Register(fs)
	if help, err := parseFlags(fs, rest); help || err != nil {
		return err
	}
	cfg, err := config.Load(env.getenv, &fl)
	if err != nil {
		return err
	}
	if cfg.RedisURL == "" {
		return &config.SettingError{Name: "REDIS_URL", Problem: "is required"}
	}
	conn, err := config.ParseRedisURL(cfg.RedisURL)
	if err != nil {
		return &config.SettingError{Name: "REDIS_URL", Problem: err.Error()}
	}
	log := logging.New(env.stderr, cfg.Log)
	rdb, err := server.Open(ctx, conn, server.RedisChecks{AllowEviction: true, AllowNoPersistence: true}, log) // only plans are written
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
			return &usageError{Msg: usage}
		}
		id, err := strconv.ParseInt(pos[0], 10, 64)
		if err != nil || id <= 0 {
			return &usageError{Msg: "installation must be a positive integer"}
		}
		tier, err := jobs.ParseTier(pos[1])
		if err != nil {
			return &usageError{Msg: err.Error()}
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
			return &usageError{Msg: usage}
		}
		id, err := strconv.ParseInt(pos[0], 10, 64)
		if err != nil || id <= 0 {
			return &usageError{Msg: "installation must be a positive integer"}
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
	return &usageError{Msg: usage}
}

func runFake(ctx context.Context, env *cmdEnv, args []string) error {
	usage := "prq fake github|openai [--addr 127.0.0.1:9100] — a faithful fake of the GitHub API or an OpenAI-compatible provider"
	if len(args) == 0 || (args[0] != "github" && args[0] != "openai") {
		return &usageError{Msg: usage}
	}
	which := args[0]
	fs := newFlagSet(env, "fake "+which, usage)
	addr := fs.String("addr", "127.0.0.1:9100", "listen address")
	compress := fs.Float64("compress", 1, "time compression: limits per minute/compress")
	keyPath := fs.String("app-public-key", "", "github: PEM of the App's RSA key (private or public) to verify JWTs")
	appID := fs.Int64("app-id", 1, "github: the App id JWTs must carry")
	corpusPath := fs.String("corpus", "", "github: prs.jsonl to serve (default: ../shared/fixtures/pr-corpus when present, else generated PRs)")
	inst := fs.Int64("installation", 1, "github: the installation serving the PRs")
	apiKey := fs.String("api-key", "", "openai: the only API key accepted (default: any)")
	replies := fs.String("replies", "json", "openai: how the fake model answers reviews: json, prose (unless response_format asks for JSON), fenced, outside (lines outside the diff) or cut")
	limiter := fs.String("limiter", fakeopenai.LimiterBucket, "openai: how the limits are counted: bucket (OpenAI's continuous refill) or window (at most the limit in any sliding period)")
	if help, err := parseFlags(fs, args[1:]); help || err != nil {
		return err
	}
	if *compress <= 0 {
		return &usageError{Msg: "--compress must be positive"}
	}
	per := time.Duration(float64(time.Minute) / *compress)
	var h http.Handler
	switch which {
	case "openai":
		cfg := config.Default()
		var keys []string
		if *apiKey != "" {
			keys = []string{*apiKey}
		}
		style, err := fakeopenai.ParseReplyStyle(*replies)
		if err != nil {
			return &usageError{Msg: err.Error()}
		}
		if *limiter != fakeopenai.LimiterBucket && *limiter != fakeopenai.LimiterWindow {
			return &usageError{Msg: fmt.Sprintf("--limiter must be %s or %s, got %q", fakeopenai.LimiterBucket, fakeopenai.LimiterWindow, *limiter)}
		}
		h = fakeopenai.New(fakeopenai.Config{Models: harness.FakeModels(&cfg), Period: per, Keys: keys, LatencyScale: 1 / *compress, Replies: style, Limiter: *limiter})
	case "github":
		if *keyPath == "" {
			return &usageError{Msg: "fake github needs --app-public-key (the App's key, to verify its JWTs)"}
		}
		b, err := os.ReadFile(*keyPath)
		if err != nil {
			return err
		}
		pub, err := harness.PublicKey(b)
		if err != nil {
			return err
		}
		gh := fakegithub.New(fakegithub.Config{AppID: *appID, PublicKey: pub, WritePeriod: per})
		prs, src, err := harness.LoadPRs(*corpusPath, 200, 1)
		if err != nil {
			return err
		}
		for _, p := range prs {
			gh.AddPR(*inst, "", "", p)
		}
		fmt.Fprintf(env.stdout, "serving %d PRs from %s for installation %d\n", len(prs), src, *inst)
		h = gh
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	fmt.Fprintf(env.stdout, "fake %s listening on http://%s (limits per %s)\n", which, ln.Addr(), per)
	<-ctx.Done()
	return srv.Close()
}
