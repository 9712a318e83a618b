// Package bench measures prq against today's alternatives (its baseline
// strategies) on one seeded workload, with real worker processes, a real
// Redis and the fake provider and GitHub: it builds the workload, runs
// each strategy, computes the figures (utilisation, worst interval,
// waits, fairness, inversions) and writes the table, JSON and SVG. The
// bench-worker process (RunWorker) records every LLM call. It owns the
// measurement, not the fakes or processes (internal/harness).
package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"gopkg.in/yaml.v3"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/harness"
	"github.com/prq-dev/prq/internal/logging"
	"github.com/prq-dev/prq/internal/metrics"
	"github.com/prq-dev/prq/internal/quantile"
	"github.com/prq-dev/prq/internal/redisproc"
	"github.com/prq-dev/prq/internal/server"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// Flags are the benchmark's settings.
type Flags struct {
	agents      int // > 0: the gateway's agents experiment instead (agents.go)
	processes   int
	concurrency int
	sim         time.Duration
	compress    float64
	seed        int64
	strategies  string
	out         string
	scale       string
	drain       float64
	corpus      string
	// providerLimiter is how the fake provider counts its limits:
	// fakeopenai.LimiterBucket or fakeopenai.LimiterWindow.
	providerLimiter string
	// provider is the fake provider's dialect prq calls: ProviderOpenAI
	// or ProviderAnthropic (Claude models, input and output limits
	// apart, the input limit binding).
	provider     string
	windowMargin time.Duration
	sendLag      time.Duration
	// contextTokens is jobs.context_tokens for every strategy (negative:
	// the default)
	contextTokens int64
	// workload is WorkloadDefault, WorkloadFairness or WorkloadCeiling.
	workload string
	// simSet and scaleSet: --duration and --scale were given (the
	// ceiling has defaults of its own).
	simSet, scaleSet bool
	// the ceiling's (ceiling.go): its limiters, whether to run on a local
	// cluster too, its upstream, an arrival rate instead of a full
	// backlog, and the worker binary (tests; default this program).
	limiters   string
	cluster    bool
	upstream   string
	rate       float64
	chatsPerPR float64
	// exe is the prq binary the worker processes run (tests: one built
	// for them); this process's own when empty
	exe string
	// gitlabTenants moves this many of the default workload's tenants to
	// GitLab (gitlabOrder): one set of workers, both forges
	gitlabTenants int
}

// The strategies that run prq's own admission: with each model's limiter
// as configured (a token bucket by default), with every model set to
// limiter: window, or with every model set to settle: debt (usage beyond
// the estimate charged, the settle policy before estimate).
const (
	StrategyPrq       = "prq"
	StrategyPrqWindow = "prq-window"
	StrategyPrqAuto   = "prq-auto"
	StrategyPrqDebt   = "prq-debt"
	// StrategyPrqLanes is prq with the trial and free tiers on the batch
	// lane (every model batch: true).
	StrategyPrqLanes = "prq-lanes"
)

// defaultStrategies run when --strategies is not given; against a
// window-limited provider prq runs with both limiters, side by side.
const (
	defaultStrategies       = "prq,asynq-recipe,handler-wait,naive"
	defaultWindowStrategies = "prq-window,prq,asynq-recipe,handler-wait,naive"
)

// benchEvent is one webhook of the workload, at an offset in real time.
type benchEvent struct {
	at     time.Duration
	event  string
	body   []byte
	pr     jobs.PR
	tier   jobs.Tier
	chatID int64
}

type benchWorkload struct {
	events []benchEvent
	prs    []corpus.PR // served by the fake GitHub, with their installation
	insts  []int64
	tiers  map[int64]jobs.Tier
}

// buildWorkload spreads PR arrivals over the simulated span, across
// tenants of each tier, with one tenant sending very large PRs, and
// bursts of chat comments. Same seed, same workload.
func buildWorkload(prs []corpus.PR, b Flags) benchWorkload {
	rng := rand.New(rand.NewSource(b.seed))
	span := time.Duration(float64(b.sim) / b.compress)
	w := benchWorkload{tiers: map[int64]jobs.Tier{}}
	tenantTiers := []jobs.Tier{jobs.TierPaid, jobs.TierPaid, jobs.TierPaid, jobs.TierTrial, jobs.TierTrial, jobs.TierTrial, jobs.TierFree, jobs.TierFree, jobs.TierFree, jobs.TierFree}
	for i, t := range tenantTiers {
		w.tiers[int64(i+1)] = t
		w.insts = append(w.insts, int64(i+1))
	}
	moveToGitLab(&w, b.gitlabTenants)
	var big, normal []corpus.PR
	for _, p := range prs {
		switch {
		case len(p.Files) >= 20:
			big = append(big, p)
		case len(p.Files) > 0:
			normal = append(normal, p)
		}
	}
	if len(big) == 0 {
		big = normal
	}
	// arrivals: about one PR per simulated 8 s, enough to keep the review
	// model saturated through the arrivals
	n := int(b.sim.Seconds() / 8)
	number := 1
	add := func(inst int64, p corpus.PR, at time.Duration) {
		p.Number = number
		number++
		p.HeadSHA = fmt.Sprintf("%040x", rng.Uint64())
		owner := fmt.Sprintf("tenant-%d", inst)
		w.prs = append(w.prs, p)
		if jobs.ForgeOf(inst) == jobs.ForgeGitLab { // its Merge Request Hook is built when sent
			pr := jobs.PR{Installation: inst, Owner: glOwner(inst), Repo: p.Name(), Number: p.Number}
			w.events = append(w.events, benchEvent{at: at, event: eventGitLabOpen, pr: pr, tier: w.tiers[inst]})
			return
		}
		pr := jobs.PR{Installation: inst, Owner: owner, Repo: p.Name(), Number: p.Number}
		body := traffic.PullRequestEvent("opened", traffic.PR{Installation: inst, Owner: owner, Repo: p.Name(), Number: p.Number, Title: p.Title, Head: p.HeadSHA, Base: p.BaseSHA})
		w.events = append(w.events, benchEvent{at: at, event: "pull_request", body: body, pr: pr, tier: w.tiers[inst]})
	}
	for i := 0; i < n; i++ {
		at := time.Duration(rng.Float64() * float64(span) * 0.8)
		inst := w.insts[rng.Intn(len(w.insts)-1)+1] // tenant 1 is the big-PR tenant
		add(inst, normal[rng.Intn(len(normal))], at)
	}
	for i := 0; i < 3; i++ { // the tenant with very large PRs, early
		add(1, big[rng.Intn(len(big))], time.Duration(float64(span)*0.05*float64(i)))
	}
	// chat bursts at 30% and 60% of the span: ten comments at once
	chatID := int64(7_000_000)
	sort.Slice(w.events, func(i, j int) bool { return w.events[i].at < w.events[j].at })
	for _, frac := range []float64{0.3, 0.6} {
		at := time.Duration(float64(span) * frac)
		var open []benchEvent
		for _, e := range w.events {
			if (e.event == "pull_request" || e.event == eventGitLabOpen) && e.at < at {
				open = append(open, e)
			}
		}
		for k := 0; k < 10 && len(open) > 0; k++ {
			e := open[rng.Intn(len(open))]
			chatID++
			if e.event == eventGitLabOpen {
				w.events = append(w.events, benchEvent{at: at, event: eventGitLabNote, pr: e.pr, tier: e.tier, chatID: chatID})
				continue
			}
			body := traffic.IssueCommentEvent(traffic.Comment{Installation: e.pr.Installation, Owner: e.pr.Owner, Repo: e.pr.Repo, Number: e.pr.Number,
				ID: chatID, Author: "dev", Body: "@prq-bench is this change safe?"})
			w.events = append(w.events, benchEvent{at: at, event: "issue_comment", body: body, pr: e.pr, tier: e.tier, chatID: chatID})
		}
	}
	sort.SliceStable(w.events, func(i, j int) bool { return w.events[i].at < w.events[j].at })
	return w
}

// benchResult is one strategy's figures.
type benchResult struct {
	Strategy          string  `json:"strategy"`
	Processes         int     `json:"processes"`
	Complete          bool    `json:"complete"`
	PRsDone           int     `json:"prs_done"`
	PRs               int     `json:"prs"`
	Provider429s      int64   `json:"provider_429s"`
	LLMCalls          int64   `json:"llm_calls"`
	HandlerRuns       int64   `json:"handler_runs"`
	HandlerRunsPerLLM float64 `json:"handler_runs_per_llm_call"`
	RedisCmdsPerLLM   float64 `json:"redis_commands_per_llm_call"`
	// TPMUtilisation is how much of the review model's limit was used
	// from the first admission to the last: against a bucket provider,
	// admitted over what the bucket allowed (burst + rate·span); against
	// a window provider, the mean fill of its windows over that span
	// (ratelimit.WindowReport.WhileQueued).
	TPMUtilisation float64 `json:"tpm_utilisation"`
	// TPMUtilisationBucket is the bucket's measure whatever the provider
	// (what the bench printed for a window provider before).
	TPMUtilisationBucket float64 `json:"tpm_utilisation_bucket_measure"`
	// TPMBacklogged is, against a window provider, the mean fill of the
	// review model's windows during all of which one of its jobs waited
	// (created, not yet called); BacklogWindows how many such windows,
	// sampled a hundred per window length, there were.
	TPMBacklogged  float64 `json:"tpm_utilisation_backlogged_windows"`
	BacklogWindows int     `json:"backlog_windows"`
	// WindowGap splits what those windows left unused.
	WindowGap windowGap `json:"window_gap"`
	// HoldMS is how long prq held the review model's calls past the
	// provider's window (the margin, or a replied call's way: callHold),
	// mean ms (0: a token bucket)
	HoldMS float64 `json:"hold_ms,omitempty"`
	// Ideal is TPMBacklogged as an admission with no latency would make
	// it, on the same calls with the same hold, in each order.
	Ideal            idealFills `json:"ideal_backlogged_fill"`
	RPMUtilisation   float64    `json:"rpm_utilisation"`
	WorstVsAllowance float64    `json:"worst_interval_vs_allowance"`
	WorstWindowVsTPM float64    `json:"worst_period_window_vs_tpm"`
	ChatWaitP50      float64    `json:"chat_wait_p50_s"`
	ChatWaitP99      float64    `json:"chat_wait_p99_s"`
	// ChatStages: where the chats' waits went (chatstages.go).
	ChatStages    []chatStage        `json:"chat_stages,omitempty"`
	ChatsAnswered int                `json:"chats_answered"`
	Chats         int                `json:"chats"`
	PRTimeP50     map[string]float64 `json:"pr_time_p50_s"`
	PRTimeP95     map[string]float64 `json:"pr_time_p95_s"`
	Inversions    int                `json:"priority_inversions"`
	Jain          map[string]float64 `json:"jain_index"`
	// JainSummed is Jain's index of tokens summed over the windows in
	// which all of a tier's tenants waited (jainSummed).
	JainSummed map[string]float64 `json:"jain_index_summed"`
	// TierShares are the tiers' shares of review tokens (the bottleneck
	// model; free has no reviews) in windows where every tier with reviews
	// waited, of which there were ShareWindows.
	TierShares   map[string]float64 `json:"tier_shares_review"`
	ShareWindows int                `json:"tier_share_windows"`
	MakespanS    float64            `json:"makespan_s"`
	PeakRSSMB    float64            `json:"peak_worker_rss_mb"`
	Series       []seriesPoint      `json:"series"`
	LimitPerS    float64            `json:"limit_tokens_per_s"`
	RedisCost    redisCost          `json:"redis_cost"`
	Loss         utilisationLoss    `json:"review_model_utilisation_loss"`
	// Bill is what the provider billed, in dollars at the models' list
	// prices.
	Bill bill `json:"bill"`
	// InputPerLimit is, against an Anthropic provider, the review model's
	// input tokens answered per period (cache reads included) over its
	// input-tokens-per-minute limit, from its first admission to its last.
	InputPerLimit float64 `json:"input_per_itpm,omitempty"`
	// GitLabPRs and GitLabDone are the merge requests of GitLab tenants
	// (--gitlab-tenants) among PRs and PRsDone
	GitLabPRs  int `json:"gitlab_prs,omitempty"`
	GitLabDone int `json:"gitlab_done,omitempty"`
}

type seriesPoint struct {
	T      float64 `json:"t"`
	Tokens float64 `json:"tokens_per_s"`
}

// Register adds the benchmark's flags to fs.
func (b *Flags) Register(fs *flag.FlagSet) {
	fs.IntVar(&b.processes, "processes", 3, "worker OS processes")
	fs.DurationVar(&b.sim, "duration", 10*time.Minute, "the simulated `duration` of the arrivals (real time: duration/compress)")
	fs.Float64Var(&b.compress, "compress", 10, "time compression: limits per minute/compress")
	fs.Int64Var(&b.seed, "seed", 1, "workload seed")
	fs.StringVar(&b.strategies, "strategies", "", "strategies to run, comma-separated: prq, prq-window (every model limiter: window), prq-auto (every model limiter: auto), prq-debt (every model settle: debt), prq-lanes (trial and free on the batch lane), asynq-recipe, handler-wait, naive (default "+defaultStrategies+"; with --provider-limiter window, "+defaultWindowStrategies+")")
	fs.StringVar(&b.workload, "workload", WorkloadDefault, "default (arrivals over the span, a tenant with very large PRs, chat bursts), fairness (three tenants per tier backlogged at once: Jain's index inside each tier and the tiers' shares against their weights) or ceiling (a provider with no latency and no limit in reach: calls/s, Redis CPU and commands per call, what saturates first; --duration is then each run's measured window, default 10s, and --scale its process counts, default 1,2,4,8)")
	fs.StringVar(&b.limiters, "ceiling-limiters", "bucket,window", "ceiling: the limiters to run, comma-separated")
	fs.BoolVar(&b.cluster, "redis-cluster", false, "ceiling: also run on a local 3-master Redis Cluster, the three models' admission state on three masters")
	fs.StringVar(&b.upstream, "upstream", UpstreamFake, "ceiling: fake (the fake provider, no latency, limits out of reach) or noop (a no-op provider inside each worker process)")
	fs.Float64Var(&b.rate, "rate", 0, "ceiling: pull requests per second arriving (with their chats) instead of a backlog kept full (0)")
	fs.Float64Var(&b.chatsPerPR, "chats-per-pr", -1, "ceiling: chat comments sent with each pull request (negative: as many chat calls as review calls, so the chat model has work too)")
	fs.StringVar(&b.provider, "provider", ProviderOpenAI, "the provider prq calls: openai (the bench's gpt-4o-mini and gpt-4o) or anthropic (claude-sonnet-4 and claude-sonnet-4-5 through the Messages API, input tokens per minute binding, settle: refund; the report adds the review model's input tokens per minute against its limit)")
	fs.StringVar(&b.providerLimiter, "provider-limiter", fakeopenai.LimiterBucket, "how the fake provider counts its limits: bucket (OpenAI's continuous refill) or window (at most the limit in any sliding minute)")
	fs.Int64Var(&b.contextTokens, "context-tokens", -1, "jobs.context_tokens for every strategy: tokens of a pull request's diffs in every prompt's shared context (negative: the default, 2000; 0: title, description and file list only)")
	fs.DurationVar(&b.sendLag, "send-lag", -1, "scheduler.send_lag for every strategy, in real time (negative: the default, 250ms; 0: none)")
	fs.DurationVar(&b.windowMargin, "window-margin", 0, "prq-window's window_margin, in real time (0: the default, measured from the calls, at most a sixtieth of the compressed window)")
	fs.StringVar(&b.out, "out", "bench-out", "output directory (results.md, results.json, admitted.svg, logs)")
	fs.StringVar(&b.scale, "scale", "1,2,4", "also run prq with these process `counts` (empty: skip)")
	fs.Float64Var(&b.drain, "drain", 3, "give up when work is not done after this many arrival spans")
	fs.IntVar(&b.agents, "agents", 0, "run the LLM gateway experiment instead: N agents with 1,000-token quotas, prq's gateway against a count-after-the-fact limiter")
	fs.IntVar(&b.gitlabTenants, "gitlab-tenants", 0, "move this many of the default workload's 10 tenants (at most 9; a paid, a trial and a free one first) to GitLab groups on a fake GitLab, their merge requests and chat through GitLab's webhooks, beside the GitHub ones on the same workers")
	fs.StringVar(&b.corpus, "corpus", "", "prs.jsonl (default: ../shared/fixtures/pr-corpus when present, else generated PRs)")
	for name, set := range map[string]*bool{"duration": &b.simSet, "scale": &b.scaleSet} {
		f := fs.Lookup(name)
		f.Value = &setFlag{f.Value, set}
	}
}

// setFlag records that a flag was given.
type setFlag struct {
	flag.Value
	set *bool
}

func (f *setFlag) Set(s string) error { *f.set = true; return f.Value.Set(s) }

// String is the value's (the flag package calls it on a zero setFlag
// to find the zero value for its help).
func (f *setFlag) String() string {
	if f == nil || f.Value == nil {
		return ""
	}
	return f.Value.String()
}

// Usage describes the bench command.
const Usage = "Runs prq and today's alternatives (asynq's rate-limit recipe, a handler-wait gate, naive backoff) on the same workload, side by side, with real worker processes, a real Redis and the fake provider and GitHub; prints a table and writes JSON and an SVG chart."

// Run runs every strategy and the scale runs and writes the report.
func Run(ctx context.Context, cfg *config.Config, b Flags, stdout io.Writer) error {
	if b.agents > 0 {
		return runAgents(ctx, b.agents, stdout)
	}
	b.concurrency = cfg.Worker.Concurrency
	if b.workload == WorkloadCeiling {
		if b.concurrency <= 0 {
			return &config.UsageError{Msg: "--concurrency must be positive"}
		}
		return runCeiling(ctx, cfg, b, stdout)
	}
	if b.processes <= 0 || b.concurrency <= 0 || b.compress <= 0 || b.sim <= 0 {
		return &config.UsageError{Msg: "--processes, --concurrency, --compress and --duration must be positive"}
	}
	switch b.providerLimiter {
	case fakeopenai.LimiterBucket, fakeopenai.LimiterWindow:
	default:
		return &config.UsageError{Msg: fmt.Sprintf("--provider-limiter must be %s or %s, got %q", fakeopenai.LimiterBucket, fakeopenai.LimiterWindow, b.providerLimiter)}
	}
	if b.provider != ProviderOpenAI && b.provider != ProviderAnthropic {
		return &config.UsageError{Msg: fmt.Sprintf("--provider must be %s or %s, got %q", ProviderOpenAI, ProviderAnthropic, b.provider)}
	}
	if b.workload != WorkloadDefault && b.workload != WorkloadFairness {
		return &config.UsageError{Msg: fmt.Sprintf("--workload must be %s, %s or %s, got %q", WorkloadDefault, WorkloadFairness, WorkloadCeiling, b.workload)}
	}
	if b.gitlabTenants < 0 || b.gitlabTenants > len(gitlabOrder) || b.gitlabTenants > 0 && b.workload != WorkloadDefault {
		return &config.UsageError{Msg: fmt.Sprintf("--gitlab-tenants must be within 0..%d, and only with --workload %s", len(gitlabOrder), WorkloadDefault)}
	}
	if b.strategies == "" {
		b.strategies = defaultStrategies
		if b.providerLimiter == fakeopenai.LimiterWindow {
			b.strategies = defaultWindowStrategies
		}
	}
	if err := os.MkdirAll(b.out, 0o755); err != nil {
		return err
	}
	redisURL := cfg.RedisURL
	if redisURL == "" {
		srv, err := redisproc.Start()
		if err != nil {
			return fmt.Errorf("bench: start redis-server: %w", err)
		}
		defer srv.Stop()
		redisURL = srv.URL()
	} else {
		fmt.Fprintf(stdout, "bench: using REDIS_URL %s; it will be FLUSHED between strategies\n", config.RedactURL(redisURL))
	}
	prs, src, err := harness.LoadPRs(b.corpus, 200, b.seed)
	if err != nil {
		return err
	}
	w := buildWorkload(prs, b)
	if b.workload == WorkloadFairness {
		w = buildFairnessWorkload(prs, b)
	}
	fmt.Fprintf(stdout, "bench: %d PRs and %d chat comments from %s over %s simulated (%s real), %d worker processes x %d\n",
		len(w.prs), len(w.events)-len(w.prs), src, b.sim, time.Duration(float64(b.sim)/b.compress), b.processes, b.concurrency)
	var results []benchResult
	for _, s := range config.SplitList(b.strategies) {
		r, err := benchStrategy(ctx, stdout, b, w, redisURL, s, b.processes)
		if err != nil {
			return fmt.Errorf("bench %s: %w", s, err)
		}
		results = append(results, r)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	var scale []benchResult
	for _, n := range config.SplitList(b.scale) {
		p, err := strconv.Atoi(n)
		if err != nil || p <= 0 {
			return &config.UsageError{Msg: "--scale takes process counts like 1,2,4"}
		}
		r, err := benchStrategy(ctx, stdout, b, w, redisURL, StrategyPrq, p)
		if err != nil {
			return fmt.Errorf("bench scale %d: %w", p, err)
		}
		scale = append(scale, r)
	}
	return writeBench(stdout, b, results, scale)
}

// benchStrategy runs the workload once under one strategy.
func benchStrategy(ctx context.Context, stdout io.Writer, b Flags, w benchWorkload, redisURL, strategy string, processes int) (benchResult, error) {
	res := benchResult{Strategy: strategy, Processes: processes, PRs: len(w.prs), PRTimeP50: map[string]float64{}, PRTimeP95: map[string]float64{}, Jain: map[string]float64{}}
	opt, err := config.ParseRedisURL(redisURL)
	if err != nil {
		return res, err
	}
	rdb := opt.MakeRedisClient().(redis.UniversalClient)
	defer rdb.Close()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		return res, err
	}
	cfg := harness.RunConfig(redisURL, b.compress, b.concurrency)
	cfg.AllowNoPersistence = true // the bench flushes its Redis between strategies: nothing in it is meant to last
	if b.provider == ProviderAnthropic {
		claudeModels(&cfg)
	}
	if b.sendLag >= 0 {
		lag := config.Duration(b.sendLag)
		cfg.Scheduler.SendLag = &lag
	}
	if b.contextTokens >= 0 {
		n := b.contextTokens
		cfg.Jobs.ContextTokens = &n
	}
	for i := range cfg.Models {
		switch strategy {
		case StrategyPrqWindow, StrategyPrqAuto:
			cfg.Models[i].Limiter = string(ratelimit.LimiterWindow)
			if strategy == StrategyPrqAuto {
				cfg.Models[i].Limiter = string(ratelimit.LimiterAuto)
			}
			cfg.Models[i].WindowMargin = config.Duration(b.windowMargin)
		case StrategyPrqDebt:
			cfg.Models[i].Settle = string(ratelimit.PolicyDebt)
		case StrategyPrqLanes:
			cfg.Models[i].Batch = true
		}
	}
	if strategy == StrategyPrqLanes {
		for _, name := range []string{"trial", "free"} {
			t := cfg.Tiers[name]
			t.Lane = config.LaneBatch
			cfg.Tiers[name] = t
		}
	}
	fakes, err := harness.StartFakes(&cfg, b.compress, "sk-bench-"+harness.RandomHex(8), b.seed, true)
	if err != nil {
		return res, err
	}
	defer fakes.Close()
	if err := fakes.OpenAI.SetLimiter(b.providerLimiter); err != nil {
		return res, err
	}
	for _, p := range w.prs {
		if inst := instOf(w, p); jobs.ForgeOf(inst) != jobs.ForgeGitLab {
			fakes.GitHub.AddPR(inst, fmt.Sprintf("tenant-%d", inst), p.Name(), p)
		}
	}
	gl, err := startGitLabBench(&cfg, w)
	if err != nil {
		return res, err
	}
	if gl != nil {
		defer gl.stop()
	}
	fakes.Configure(&cfg, "prq-bench")
	env := append(fakes.WorkerEnv(redisURL, "prq-bench"), "PRQ_ALLOW_NO_PERSISTENCE=true")
	if b.provider == ProviderAnthropic {
		// the same fake, its Messages API (the API's root, without /v1)
		cfg.Providers = []config.ProviderConfig{{Name: "claude", Kind: config.KindAnthropic, BaseURL: strings.TrimSuffix(fakes.OpenAIURL, "/v1"),
			KeyEnv: config.EnvList{"ANTHROPIC_API_KEY"}, Keys: []config.Secret{config.Secret(fakes.APIKey)}}}
		cfg.OpenAI.BaseURL = ""
		// the implicit OpenAI provider's settings are refused beside
		// providers: the workers get the Anthropic key alone
		env = slices.DeleteFunc(env, func(kv string) bool {
			return strings.HasPrefix(kv, "OPENAI_BASE_URL=") || strings.HasPrefix(kv, "OPENAI_API_KEY=")
		})
		env = append(env, "ANTHROPIC_API_KEY="+fakes.APIKey)
	}
	cfg.Addr = "127.0.0.1:0"
	// the workers' configuration file
	cfgFile := filepath.Join(b.out, "bench-config.yaml")
	wcfg := map[string]any{"models": cfg.Models, "jobs": cfg.Jobs, "tiers": cfg.Tiers, "log": cfg.Log, "shutdown_timeout": cfg.ShutdownTimeout, "worker": cfg.Worker, "scheduler": cfg.Scheduler,
		"github": map[string]any{"write_gap": cfg.GitHub.WriteGap}, // compressed like the fake GitHub's write limit
		"batch":  cfg.Batch, "providers": cfg.Providers}
	if gl != nil {
		wcfg["gitlab"] = gl.workerConfig(cfg.GitLab)
	}
	yb, _ := yaml.Marshal(wcfg)
	if err := os.WriteFile(cfgFile, yb, 0o600); err != nil {
		return res, err
	}
	// the serve side: webhooks in, jobs enqueued the strategy's way
	sctx, stopServe := context.WithCancel(ctx)
	defer stopServe()
	log := logging.New(io.Discard, cfg.Log)
	s, err := server.New(sctx, &cfg, log, opt)
	if err != nil {
		return res, err
	}
	defer s.Close()
	for inst, t := range w.tiers {
		s.Store().SetPlan(ctx, store.Plan{Installation: inst, Tier: t, Explicit: true})
	}
	opts, err := strategyOptions(s, strategy, processes)
	if err != nil {
		return res, err
	}
	served := harness.Serve(sctx, s, io.Discard, server.Roles{HTTP: true}, opts)
	// the worker processes
	exe := b.exe
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return res, err
		}
	}
	cost := newCostMeter(rdb, time.Duration(float64(b.sim)/b.compress), s.Inspector())
	cost.serveIdle(ctx) // before the workers start
	var procs []*harness.Proc
	var records []string
	for i := 0; i < processes; i++ {
		rec := filepath.Join(b.out, fmt.Sprintf("%s-%d-worker%d.json", strategy, processes, i))
		os.Remove(rec)
		records = append(records, rec)
		p, err := harness.StartProc(exe, []string{"bench-worker", "--strategy", strategy, "--processes", strconv.Itoa(processes), "--record", rec, "--config", cfgFile,
			"--concurrency", strconv.Itoa(b.concurrency)}, env, filepath.Join(b.out, fmt.Sprintf("%s-%d-worker%d.log", strategy, processes, i)))
		if err != nil {
			return res, err
		}
		procs = append(procs, p)
	}
	cost.workersIdle(ctx, &res.RedisCost, processes)
	rdb.ConfigResetStat(ctx)
	sender := &traffic.Sender{URL: "http://" + s.ListenAddr() + "/webhook", Secret: []byte(cfg.GitHub.WebhookSecret)}
	start := time.Now()
	sent := map[string]time.Time{}
	chatSent := map[int64]time.Time{}
	span := time.Duration(float64(b.sim) / b.compress)
	deadline := start.Add(time.Duration(float64(span) * (1 + b.drain)))
	next := 0
	lastReport := start
	for {
		now := time.Now()
		cost.observe(ctx, now.Sub(start))
		for next < len(w.events) && now.Sub(start) >= w.events[next].at {
			e := w.events[next]
			var code int
			var err error
			if e.event == eventGitLabOpen || e.event == eventGitLabNote {
				code, err = gl.send(ctx, "http://"+s.ListenAddr()+"/webhook/gitlab", e)
			} else {
				code, err = sender.Send(ctx, e.event, traffic.NewDelivery(), e.body)
			}
			if err != nil || code >= 300 {
				return res, fmt.Errorf("webhook %s: %d %v", e.event, code, err)
			}
			if e.chatID != 0 {
				chatSent[e.chatID] = time.Now()
			} else {
				sent[e.pr.String()] = time.Now()
			}
			next++
		}
		for i, p := range procs {
			if p.Exited() {
				// a worker that stops (its configuration refused, a
				// crash) ends the run: its log says why
				logPath := filepath.Join(b.out, fmt.Sprintf("%s-%d-worker%d.log", strategy, processes, i))
				out, _ := os.ReadFile(logPath)
				return res, fmt.Errorf("bench: worker process %d of %s exited during the run (%s): %s", i, strategy, logPath, lastLines(string(out), 5))
			}
		}
		done, answered := benchProgress(fakes, gl, w)
		if time.Since(lastReport) >= 5*time.Second {
			lastReport = time.Now()
			fmt.Fprintf(stdout, "bench %-13s x%d  %5.0fs  sent %3d/%d  PRs done %3d/%d  chats %2d/%d  provider calls %d\n", strategy, processes,
				time.Since(start).Seconds(), next, len(w.events), done, len(w.prs), answered, len(chatSent), fakes.LLMCalls())
		}
		if next == len(w.events) && done == len(w.prs) && answered == len(chatSent) {
			res.Complete = true
			break
		}
		if now.After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cmds := harness.RedisInfoInt(ctx, rdb, "stats", "total_commands_processed")
	for _, p := range procs {
		p.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		p.Wait(30 * time.Second)
	}
	stopServe()
	<-served
	// figures
	var calls []callRecord
	admittedAt := map[string]int64{}
	for _, rf := range records {
		bb, err := os.ReadFile(rf)
		if err != nil {
			continue
		}
		var wr workerReport
		if json.Unmarshal(bb, &wr) == nil {
			calls = append(calls, wr.Calls...)
			for id, at := range wr.Admitted {
				admittedAt[id] = at
			}
			res.HandlerRuns += wr.HandlerRuns
			res.PeakRSSMB = math.Max(res.PeakRSSMB, float64(wr.PeakRSS)/(1<<20))
		}
	}
	for i := range calls {
		calls[i].Admitted = admittedAt[calls[i].Task]
	}
	stats := fakes.OpenAI.Stats()
	for _, st := range stats {
		res.Provider429s += st.RateLimited
		res.LLMCalls += st.Requests - st.RateLimited + st.Batch.Requests
	}
	if res.LLMCalls > 0 {
		res.HandlerRunsPerLLM = float64(res.HandlerRuns) / float64(res.LLMCalls+res.Provider429s)
		res.RedisCmdsPerLLM = float64(cmds) / float64(res.LLMCalls)
	}
	review := cfg.Jobs.ReviewModel
	rm, _ := cfg.Model(review)
	lim, _ := rm.Limits()
	var adm, reqs []ratelimit.Admission
	for _, x := range fakes.OpenAI.Admissions(review) {
		adm = append(adm, ratelimit.Admission{At: x.At, Cost: x.Cost})
		reqs = append(reqs, ratelimit.Admission{At: x.At, Cost: 1})
	}
	// the provider's ledger of the review model, for reading a run after
	// the fact (per-window fill against the calls' waits)
	if ab, err := json.Marshal(fakes.OpenAI.Admissions(review)); err == nil {
		os.WriteFile(filepath.Join(b.out, fmt.Sprintf("%s-%d-admissions.json", strategy, processes)), ab, 0o644)
	}
	tr := ratelimit.CheckIntervals(adm, lim.TokensPerPeriod, lim.Period, lim.BurstTokens)
	rr := ratelimit.CheckIntervals(reqs, lim.RequestsPerPeriod, lim.Period, lim.BurstRequests)
	res.TPMUtilisation, res.RPMUtilisation, res.WorstVsAllowance = tr.Utilisation, rr.Utilisation, tr.WorstRatio
	res.TPMUtilisationBucket = tr.Utilisation
	if b.providerLimiter == fakeopenai.LimiterWindow {
		// the fake's window is the period
		res.TPMUtilisation = ratelimit.CheckWindows(adm, lim.TokensPerPeriod, lim.Period).WhileQueued
	}
	res.WorstWindowVsTPM = float64(stats[review].MaxWindowTokens) / float64(lim.TokensPerPeriod)
	res.Series = series(fakes.OpenAI.Admissions(review), start, lim.Period/6)
	cost.saturated(&res.RedisCost, fakes.OpenAI, []string{cfg.Jobs.SummaryModel, cfg.Jobs.ReviewModel})
	res.LimitPerS = float64(lim.TokensPerPeriod) / lim.Period.Seconds()
	// PR completion and chat waits, in uncompressed seconds
	done := map[string][]float64{}
	var last time.Time
	for _, e := range w.events {
		if e.chatID != 0 {
			continue
		}
		if e.event == eventGitLabOpen {
			res.GitLabPRs++
			if at, _ := gl.notes(e.pr); !at.IsZero() {
				res.PRsDone++
				res.GitLabDone++
				done[string(e.tier)] = append(done[string(e.tier)], at.Sub(sent[e.pr.String()]).Seconds()*b.compress)
				if at.After(last) {
					last = at
				}
			}
			continue
		}
		for _, c := range fakes.GitHub.Comments(e.pr.Owner, e.pr.Repo, e.pr.Number) {
			if strings.Contains(c.Body, workers.SummaryMarker) {
				res.PRsDone++
				done[string(e.tier)] = append(done[string(e.tier)], c.Created.Sub(sent[e.pr.String()]).Seconds()*b.compress)
				if c.Created.After(last) {
					last = c.Created
				}
				break
			}
		}
	}
	for tier, ds := range done {
		res.PRTimeP50[tier], res.PRTimeP95[tier] = quantile.Of(ds, .5), quantile.Of(ds, .95)
	}
	chatFigures(&res, b, w, calls, chatSent, fakes, gl, &cfg)
	res.Bill = billOf(stats, res.PRsDone)
	for _, byTier := range metrics.Costs(ctx, rdb) { // prq's own count, beside the provider's bill
		for _, d := range byTier {
			res.Bill.Counted += d
		}
	}
	if b.provider == ProviderAnthropic {
		res.InputPerLimit = inputPerLimit(fakes.OpenAI.Admissions(review), rm.InputTokensPerMinute, rm.Period.D())
	}
	if !last.IsZero() {
		res.MakespanS = last.Sub(start).Seconds() * b.compress
	} else {
		res.MakespanS = elapsed.Seconds() * b.compress
	}
	res.Inversions = inversions(calls, *cfg.Scheduler.ChatCap, cfg.Scheduler.Aging.D())
	res.Loss = lossOf(fakes.OpenAI.Admissions(review), calls, review, lim.TokensPerPeriod, lim.Period, lim.BurstTokens)
	if b.providerLimiter == fakeopenai.LimiterWindow {
		res.TPMBacklogged, res.BacklogWindows = backloggedFill(fakes.OpenAI.Admissions(review), waitingSpans(calls, review), lim.TokensPerPeriod, lim.Period)
		// how much longer than the provider prq counts a call
		holdOf := func(callRecord) time.Duration { return 0 }
		if lim.Windowed() {
			holdOf = func(c callRecord) time.Duration { return callHold(c, lim.Period, lim.WindowMargin, lim.Period/60) }
		}
		hold := meanHold(calls, review, holdOf)
		res.HoldMS = float64(hold.Microseconds()) / 1000
		res.WindowGap = windowGapOf(fakes.OpenAI.Admissions(review), calls, review, lim.TokensPerPeriod, lim.Period, holdOf)
		res.Ideal = idealFillsOf(calls, review, lim.TokensPerPeriod, lim.Period, hold)
	}
	// fairness windows: five periods, or one in the fairness workload,
	// whose backlog drains in minutes (uncompressed)
	fairWindow := 5 * lim.Period
	if b.workload == WorkloadFairness {
		fairWindow = lim.Period
	}
	res.Jain = jain(calls, w.tiers, fairWindow)
	res.JainSummed = jainSummed(calls, w.tiers, fairWindow)
	res.TierShares, res.ShareWindows = tierShares(calls, w.tiers, "review", fairWindow)
	fmt.Fprintf(stdout, "bench %-13s x%d  done in %s: %d/%d PRs, %d provider 429s, TPM utilisation %.1f%%, worst interval %.3f of allowance\n",
		strategy, processes, elapsed.Round(time.Second), res.PRsDone, res.PRs, res.Provider429s, 100*res.TPMUtilisation, res.WorstVsAllowance)
	return res, nil
}

// chatFigures sets the chats' counts, waits and stages: replies are
// matched to chats in order, per PR; a chat's stages come from its last
// successful call.
func chatFigures(res *benchResult, b Flags, w benchWorkload, calls []callRecord, chatSent map[int64]time.Time, fakes *harness.Fakes, gl *gitlabBench, cfg *config.Config) {
	var chatWaits []float64
	var traces []chatTrace
	lastCall := map[int64]callRecord{}
	for _, c := range calls {
		if c.Comment != 0 && c.Outcome == "ok" && c.At >= lastCall[c.Comment].At {
			lastCall[c.Comment] = c
		}
	}
	byPR := map[string][]benchEvent{}
	for _, e := range w.events {
		if e.chatID != 0 {
			res.Chats++
			byPR[e.pr.String()] = append(byPR[e.pr.String()], e)
		}
	}
	for _, es := range byPR {
		pr := es[0].pr
		var replies []time.Time
		if jobs.ForgeOf(pr.Installation) == jobs.ForgeGitLab {
			_, replies = gl.notes(pr)
		}
		for _, c := range fakes.GitHub.Comments(pr.Owner, pr.Repo, pr.Number) {
			if strings.HasPrefix(c.Body, "@dev ") {
				replies = append(replies, c.Created)
			}
		}
		sort.Slice(es, func(i, j int) bool { return chatSent[es[i].chatID].Before(chatSent[es[j].chatID]) })
		for k, e := range es {
			if k < len(replies) {
				chatWaits = append(chatWaits, replies[k].Sub(chatSent[e.chatID]).Seconds()*b.compress)
				res.ChatsAnswered++
				if c, ok := lastCall[e.chatID]; ok {
					traces = append(traces, chatTrace{sent: chatSent[e.chatID].UnixMilli(), reply: replies[k].UnixMilli(), call: c})
				}
			}
		}
	}
	res.ChatWaitP50, res.ChatWaitP99 = quantile.Of(chatWaits, .5), quantile.Of(chatWaits, .99)
	if cm, ok := cfg.Model(cfg.Jobs.ChatModel); ok {
		cl, _ := cm.Limits()
		res.ChatStages = chatStagesOf(traces, fakes.OpenAI.Admissions(cm.Name), cl.TokensPerPeriod, cl.Period, cl.BurstTokens, b.compress)
	}
}

func instOf(w benchWorkload, p corpus.PR) int64 {
	for _, e := range w.events {
		if e.chatID == 0 && e.pr.Number == p.Number {
			return e.pr.Installation
		}
	}
	return 1
}

func benchProgress(f *harness.Fakes, gl *gitlabBench, w benchWorkload) (done, answered int) {
	for _, e := range w.events {
		if e.chatID != 0 {
			continue
		}
		if e.event == eventGitLabOpen {
			if n, _ := gl.progress(e.pr); n > 0 {
				done++
			}
		} else if f.Summaries(e.pr) > 0 {
			done++
		}
	}
	chats := map[string]int{}
	refs := map[string]jobs.PR{}
	for _, e := range w.events {
		if e.chatID != 0 {
			chats[e.pr.String()]++
			refs[e.pr.String()] = e.pr
		}
	}
	for k, n := range chats {
		pr := refs[k]
		replies := 0
		if jobs.ForgeOf(pr.Installation) == jobs.ForgeGitLab {
			_, replies = gl.progress(pr)
		}
		for _, c := range f.GitHub.Comments(pr.Owner, pr.Repo, pr.Number) {
			if strings.HasPrefix(c.Body, "@dev ") {
				replies++
			}
		}
		answered += min(replies, n)
	}
	return done, min(answered, countChats(w))
}

func countChats(w benchWorkload) int {
	n := 0
	for _, e := range w.events {
		if e.chatID != 0 {
			n++
		}
	}
	return n
}

// series buckets admitted tokens per step, as tokens per second.
func series(adm []fakeopenai.Admission, start time.Time, step time.Duration) []seriesPoint {
	if len(adm) == 0 {
		return nil
	}
	end := adm[len(adm)-1].At
	n := int(end.Sub(start)/step) + 1
	buckets := make([]float64, n)
	for _, a := range adm {
		i := int(a.At.Sub(start) / step)
		if i >= 0 && i < n {
			buckets[i] += float64(a.Cost)
		}
	}
	out := make([]seriesPoint, n)
	for i, v := range buckets {
		out[i] = seriesPoint{T: (time.Duration(i) * step).Seconds(), Tokens: v / step.Seconds()}
	}
	return out
}

// jain is Jain's fairness index of tokens admitted per tenant inside each
// tier, over windows in which every counted tenant was
// backlogged the whole window — some job of its waiting at every moment
// (so equal service is the fair outcome) — weighted by the tokens in each
// window.
func jain(calls []callRecord, tiers map[int64]jobs.Tier, window time.Duration) map[string]float64 {
	// the review model is the bottleneck where tenants wait; free has no
	// reviews, so its tenants are compared on summaries
	kindOf := map[jobs.Tier]string{jobs.TierPaid: "review", jobs.TierTrial: "review", jobs.TierFree: "summary"}
	out := map[string]float64{}
	if len(calls) == 0 {
		return out
	}
	lo, hi := callSpan(calls)
	step := window.Milliseconds()
	for _, tier := range []jobs.Tier{jobs.TierPaid, jobs.TierTrial, jobs.TierFree} {
		kind := kindOf[tier]
		spans := waiting(calls, kind)
		var wsum, jsum float64
		for t := lo; t+step <= hi; t += step {
			got := map[int64]float64{}
			back := map[int64]bool{}
			for tenant, sp := range spans {
				if tiers[tenant] == tier && backlogged(sp, t, t+step) {
					back[tenant] = true // had a job waiting through the whole window
				}
			}
			if len(back) < 2 {
				continue
			}
			for _, c := range calls {
				if back[c.Tenant] && c.Kind == kind && c.At >= t && c.At < t+step && c.Outcome != "429" {
					got[c.Tenant] += float64(c.Tokens)
				}
			}
			var s, s2 float64
			for ten := range back {
				s += got[ten]
				s2 += got[ten] * got[ten]
			}
			if s2 == 0 {
				continue
			}
			j := s * s / (float64(len(back)) * s2)
			wsum += s
			jsum += j * s
		}
		if wsum > 0 {
			out[string(tier)] = jsum / wsum
		}
	}
	return out
}

// callHold is how much longer than the provider a window limiter
// counts call c: the margin set (set > 0), else the margin its process
// held (measured; def where none was recorded); but a call whose reply
// came back within the window counts a window after its write, its way
// and the least margin (admission.Scheduler.Arrived): that, where
// shorter.
func callHold(c callRecord, w, set, def time.Duration) time.Duration {
	if set > 0 {
		return set
	}
	m := def
	if c.Margin > 0 {
		m = time.Duration(c.Margin) * time.Microsecond
	}
	if c.Outcome == "ok" && c.Way > 0 && c.Done > 0 && time.Duration(c.Done-c.At)*time.Millisecond < w {
		m = min(m, time.Duration(c.Way)*time.Microsecond+ratelimit.MinWindowMargin)
	}
	return m
}

// meanHold is the mean of hold over a model's calls the provider
// admitted (0 when there were none).
func meanHold(calls []callRecord, model string, hold func(callRecord) time.Duration) time.Duration {
	var sum time.Duration
	n := 0
	for _, c := range calls {
		if c.Model == model && c.Outcome != "429" {
			sum += hold(c)
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / time.Duration(n)
}

// lastLines is the last n lines of s, trimmed.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
