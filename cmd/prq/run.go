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
	"strings"
	"time"

	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/fake/fakegitlab"
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

// The shared flags (config.Flags) each command reads, besides --config:
// its help lists only these.
var (
	serveFlags   = []string{"addr", "redis-url", "log-format", "log-level", "allow-eviction", "allow-no-persistence"}
	workerFlags  = []string{"redis-url", "log-format", "log-level", "concurrency", "shutdown-timeout", "allow-eviction", "allow-no-persistence"}
	allFlags     = []string{"addr", "redis-url", "log-format", "log-level", "concurrency", "shutdown-timeout", "allow-eviction", "allow-no-persistence"}
	demoFlags    = []string{"addr", "redis-url", "log-format", "log-level"}
	benchFlags   = []string{"redis-url", "log-format", "log-level", "concurrency", "shutdown-timeout"}
	gatewayFlags = []string{"addr", "redis-url", "log-format", "log-level", "allow-eviction", "allow-no-persistence"}
	redisFlags   = []string{"redis-url"} // plan and keys
	doctorFlags  = []string{"redis-url", "allow-eviction", "allow-no-persistence"}
)

// setup parses a running command's flags (extra's, and the shared flags
// named) and its configuration.
func setup(env *cmdEnv, name, usage string, m config.Mode, args []string, extra func(*flag.FlagSet), flags ...string) (*config.Config, bool, error) {
	fs := newFlagSet(env, name, usage)
	var fl config.Flags
	fl.Register(fs, flags...)
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
	cfg, help, err := setup(env, "serve", "Runs the webhook receiver, dashboard, asynq web UI, metrics and admin API.", config.ModeServe, args, nil, serveFlags...)
	if help || err != nil {
		return err
	}
	return server.RunProcess(ctx, cfg, server.Roles{HTTP: true}, env.stdout, env.stderr)
}

func runWorker(ctx context.Context, env *cmdEnv, args []string) error {
	cfg, help, err := setup(env, "worker", "Runs jobs: admission, planning, summaries, reviews, chat and publishing. Scale by running more.", config.ModeWorker, args, nil, workerFlags...)
	if help || err != nil {
		return err
	}
	return server.RunProcess(ctx, cfg, server.Roles{Worker: true}, env.stdout, env.stderr)
}

func runAll(ctx context.Context, env *cmdEnv, args []string) error {
	cfg, help, err := setup(env, "all", "Runs serve and worker in one process.", config.ModeAll, args, nil, allFlags...)
	if help || err != nil {
		return err
	}
	return server.RunProcess(ctx, cfg, server.Roles{HTTP: true, Worker: true}, env.stdout, env.stderr)
}

func runDemo(ctx context.Context, env *cmdEnv, args []string) error {
	var d demo.Flags
	cfg, help, err := setup(env, "demo", demo.Usage, config.ModeDemo, args, d.Register, demoFlags...)
	if help || err != nil {
		return err
	}
	return demo.Run(ctx, cfg, d, env.stdout, env.stderr)
}

func runBench(ctx context.Context, env *cmdEnv, args []string) error {
	var b bench.Flags
	cfg, help, err := setup(env, "bench", bench.Usage, config.ModeCheck, args, b.Register, benchFlags...)
	if help || err != nil {
		return err
	}
	return bench.Run(ctx, cfg, b, env.stdout)
}

func runBenchWorker(ctx context.Context, env *cmdEnv, args []string) error {
	var w bench.WorkerFlags
	cfg, help, err := setup(env, "bench-worker", "A worker process of prq bench (internal).", config.ModeWorker, args, w.Register, benchFlags...)
	if help || err != nil {
		return err
	}
	return bench.RunWorker(ctx, cfg, w, env.stdout, env.stderr)
}

func runChaos(ctx context.Context, env *cmdEnv, args []string) error {
	var c chaos.Flags
	fs := newFlagSet(env, "chaos", chaos.Usage) // it runs its own Redis and workers: no configuration
	c.Register(fs)
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &usageError{Msg: "chaos: takes no arguments; prq chaos --help lists its flags"}
	}
	return chaos.Run(ctx, c, env.stdout)
}

const planUsage = "prq plan set <installation> <tier> [reason] | get <installation> | list"

func runPlan(ctx context.Context, env *cmdEnv, args []string) error {
	if len(args) == 0 {
		return &usageError{Msg: "usage: " + planUsage}
	}
	sub, rest := args[0], args[1:]
	if isHelp(args) {
		sub, rest = strings.TrimPrefix(planUsage, "prq plan "), []string{"--help"}
	} else if sub != "set" && sub != "get" && sub != "list" {
		return &usageError{Msg: fmt.Sprintf("plan: unknown subcommand %q; usage: %s", sub, planUsage)}
	}
	fs := newFlagSet(env, "plan "+sub+planArgs[sub], "Sets, shows or lists installations' plan tiers in Redis (REDIS_URL), as PUT /api/plans/{installation} does. Tiers: paid, trial, free.")
	var fl config.Flags
	fl.Register(fs, redisFlags...)
	if help, err := parseFlags(fs, rest); help || err != nil {
		return err
	}
	pos := fs.Args()
	var id int64
	var tier jobs.Tier
	switch {
	case sub == "set" && (len(pos) < 2 || len(pos) > 3), sub == "get" && len(pos) != 1, sub == "list" && len(pos) != 0:
		return &usageError{Msg: "usage: " + planUsage}
	case sub != "list":
		n, err := strconv.ParseInt(pos[0], 10, 64)
		if err != nil || n <= 0 {
			return &usageError{Msg: fmt.Sprintf("installation %q: want a positive integer", pos[0])}
		}
		id = n
	}
	if sub == "set" {
		t, err := jobs.ParseTier(pos[1])
		if err != nil {
			return &usageError{Msg: err.Error()}
		}
		tier = t
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
	enc := json.NewEncoder(env.stdout)
	enc.SetIndent("", "  ")
	switch sub {
	case "set":
		reason := ""
		if len(pos) > 2 {
			reason = pos[2]
		}
		if err := st.UpdatePlan(ctx, id, func(p *store.Plan) { p.Tier, p.Reason, p.Explicit = tier, reason, true }); err != nil {
			return err
		}
		p, err := st.GetPlan(ctx, id)
		if err != nil {
			return err
		}
		return enc.Encode(p)
	case "get":
		p, err := st.GetPlan(ctx, id)
		if err != nil {
			return err
		}
		return enc.Encode(p)
	}
	ps, err := st.ListPlans(ctx)
	if err != nil {
		return err
	}
	if ps == nil {
		ps = []store.Plan{} // [] as keys list prints, not null
	}
	return enc.Encode(ps)
}

// planArgs are each subcommand's arguments, for its usage line.
var planArgs = map[string]string{"set": " <installation> <tier> [reason]", "get": " <installation>", "list": ""}

// fakeGitLab is a fake GitLab serving the corpus's pull requests as
// merge requests, each of the project its repository names.
func fakeGitLab(corpusPath, token string, limit int, per time.Duration) (*fakegitlab.Server, int, string, error) {
	g := fakegitlab.New(fakegitlab.Config{RequestsPerPeriod: limit, Period: per})
	g.AddToken(token, "group_1_bot_fake")
	prs, src, err := harness.LoadPRs(corpusPath, 200, 1)
	if err != nil {
		return nil, 0, "", err
	}
	projects := map[string]bool{}
	for _, p := range prs {
		if !projects[p.Repo] {
			g.AddProject(p.Repo, "main", p.BaseSHA, nil)
			projects[p.Repo] = true
		}
		if err := g.AddMR(p.Repo, p.Number, "dev", p); err != nil {
			return nil, 0, "", err
		}
	}
	return g, len(prs), src, nil
}

func runFake(ctx context.Context, env *cmdEnv, args []string) error {
	usage := "Runs a faithful fake of the GitHub API (github), the GitLab API (gitlab) or an OpenAI-compatible provider (openai), for tests and demos."
	which, rest := "", args
	switch {
	case isHelp(args):
		which, rest = "github|gitlab|openai", []string{"--help"}
	case len(args) == 0 || (args[0] != "github" && args[0] != "gitlab" && args[0] != "openai"):
		return &usageError{Msg: "usage: prq fake github|gitlab|openai [flags]; prq fake --help lists the flags"}
	default:
		which, rest = args[0], args[1:]
	}
	fs := newFlagSet(env, "fake "+which+" [flags]", usage)
	addr := fs.String("addr", "127.0.0.1:9100", "listen address")
	compress := fs.Float64("compress", 1, "time compression: limits per minute/compress")
	keyPath := fs.String("app-public-key", "", "github: PEM of the App's RSA key (private or public) to verify JWTs")
	appID := fs.Int64("app-id", 1, "github: the App id JWTs must carry")
	corpusPath := fs.String("corpus", "", "github: prs.jsonl to serve (default: ../shared/fixtures/pr-corpus when present, else generated PRs)")
	inst := fs.Int64("installation", 1, "github: the installation serving the PRs")
	token := fs.String("token", "glpat-fake-token", "gitlab: the access token its bot user (group_1_bot_fake) is known by")
	glLimit := fs.Int("requests-per-minute", 2000, "gitlab: each token's requests per minute (compressed); over it, 429")
	apiKey := fs.String("api-key", "", "openai: the only API key accepted (default: any)")
	replies := fs.String("replies", "json", "openai: how the fake model answers reviews: json, prose (unless response_format asks for JSON), fenced, outside (lines outside the diff) or cut")
	limiter := fs.String("limiter", fakeopenai.LimiterBucket, "openai: how the limits are counted: bucket (OpenAI's continuous refill) or window (at most the limit in any sliding period)")
	if help, err := parseFlags(fs, rest); help || err != nil {
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
	case "gitlab":
		g, n, src, err := fakeGitLab(*corpusPath, *token, *glLimit, per)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.stdout, "serving %d merge requests from %s; the access token's bot is group_1_bot_fake\n", n, src)
		h = g
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
