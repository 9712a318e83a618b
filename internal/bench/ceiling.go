package bench

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math"
	mrand "math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"gopkg.in/yaml.v3"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/harness"
	"github.com/prq-dev/prq/internal/logging"
	"github.com/prq-dev/prq/internal/redisproc"
	"github.com/prq-dev/prq/internal/server"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
)

// WorkloadCeiling drives prq as hard as it goes: a provider with no
// latency and limits far above what admission reaches, a held backlog
// kept full, and Redis, the workers and the fakes measured while it runs.
const WorkloadCeiling = "ceiling"

// The ceiling's defaults, where --duration and --scale are left alone.
const (
	ceilingRun   = 10 * time.Second // each measured window
	ceilingIdle  = 60 * time.Second // the idle worker's window: two of the dispatch gate's re-checks
	ceilingScale = "1,2,4,8"
)

// The ceiling's limits: per second, far above what admission reaches,
// and within what the limiter stores exactly (levels scaled by the
// period in µs stay below 2^53).
const (
	ceilingPeriod   = time.Second
	ceilingRequests = 1_000_000
	ceilingTokens   = 1_000_000_000
)

// ceilingSettings are the ceiling's flags, resolved.
type ceilingSettings struct {
	run, idle   time.Duration
	procs       []int
	limiters    []string
	cluster     bool
	upstream    string
	rate        float64 // PRs per second, open loop; 0: keep the backlog full
	chatsPerPR  float64 // negative: as many chat calls as review calls
	concurrency int
	seed        int64
	out, exe    string
	corpus      string
}

func ceilingSettingsOf(b Flags) (ceilingSettings, error) {
	s := ceilingSettings{run: ceilingRun, idle: ceilingIdle, cluster: b.cluster, upstream: b.upstream, rate: b.rate, chatsPerPR: b.chatsPerPR,
		concurrency: b.concurrency, seed: b.seed, out: b.out, exe: b.exe, corpus: b.corpus}
	if b.simSet {
		s.run, s.idle = b.sim, min(ceilingIdle, b.sim)
	}
	scale := ceilingScale
	if b.scaleSet {
		scale = b.scale
	}
	for _, n := range config.SplitList(scale) {
		p, err := strconv.Atoi(n)
		if err != nil || p <= 0 {
			return s, &config.UsageError{Msg: "--scale takes process counts like 1,2,4,8"}
		}
		s.procs = append(s.procs, p)
	}
	if len(s.procs) == 0 {
		return s, &config.UsageError{Msg: "--scale: the ceiling needs at least one process count"}
	}
	for _, l := range config.SplitList(b.limiters) {
		if l != string(ratelimit.LimiterBucket) && l != string(ratelimit.LimiterWindow) {
			return s, &config.UsageError{Msg: fmt.Sprintf("--ceiling-limiters takes bucket and window, got %q", l)}
		}
		s.limiters = append(s.limiters, l)
	}
	if len(s.limiters) == 0 {
		return s, &config.UsageError{Msg: "--ceiling-limiters: at least one of bucket, window"}
	}
	if s.upstream != UpstreamFake && s.upstream != UpstreamNoop {
		return s, &config.UsageError{Msg: fmt.Sprintf("--upstream must be %s or %s, got %q", UpstreamFake, UpstreamNoop, s.upstream)}
	}
	if s.rate < 0 {
		return s, &config.UsageError{Msg: "--rate must not be negative"}
	}
	if math.IsNaN(s.chatsPerPR) || s.chatsPerPR > 100 {
		return s, &config.UsageError{Msg: "--chats-per-pr must be at most 100 (negative: as many chat calls as review calls)"}
	}
	if s.run < time.Second {
		return s, &config.UsageError{Msg: "--duration: the ceiling measures at least 1s"}
	}
	return s, nil
}

// ceilingRedis is one Redis set-up the ceiling runs on.
type ceilingRedis struct {
	mode  string // "redis" or "cluster"
	url   string
	nodes []string // the masters' addresses
}

// ceilingEnv is what every run of one ceiling shares.
type ceilingEnv struct {
	set    ceilingSettings
	prs    []corpus.PR
	src    string
	key    string    // the provider key (the limiter's tag is named by its hash)
	models [3]string // summary, review, chat
	appKey *rsa.PrivateKey
	keyPEM []byte
}

// runCeiling runs the ceiling workload: every limiter × process count on
// one Redis, then on the cluster when asked, and writes the report.
func runCeiling(ctx context.Context, cfg *config.Config, b Flags, stdout io.Writer) error {
	set, err := ceilingSettingsOf(b)
	if err != nil {
		return err
	}
	if set.exe == "" {
		if set.exe, err = os.Executable(); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(set.out, 0o755); err != nil {
		return err
	}
	env := ceilingEnv{set: set, key: "sk-ceiling-" + harness.RandomHex(16), models: [3]string{"ceiling-summary", "ceiling-review", "ceiling-chat"}}
	if env.prs, env.src, err = harness.LoadPRs(set.corpus, 200, set.seed); err != nil {
		return err
	}
	if env.appKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		return err
	}
	env.keyPEM = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(env.appKey)})
	var setups []ceilingRedis
	if cfg.RedisURL != "" {
		opt, err := redis.ParseURL(cfg.RedisURL)
		if err != nil {
			return &config.UsageError{Msg: "the ceiling takes a redis:// REDIS_URL (it starts its own cluster): " + err.Error()}
		}
		fmt.Fprintf(stdout, "ceiling: using REDIS_URL %s; it will be FLUSHED between runs\n", config.RedactURL(cfg.RedisURL))
		setups = append(setups, ceilingRedis{mode: "redis", url: cfg.RedisURL, nodes: []string{opt.Addr}})
	} else {
		srv, err := redisproc.Start()
		if err != nil {
			return fmt.Errorf("ceiling: start redis-server: %w", err)
		}
		defer srv.Stop()
		if !srv.Real() {
			return fmt.Errorf("ceiling: needs a real redis-server (its INFO CPU and commandstats)")
		}
		setups = append(setups, ceilingRedis{mode: "redis", url: srv.URL(), nodes: []string{srv.Addr}})
	}
	if set.cluster {
		cl, err := redisproc.StartCluster(ctx)
		if err != nil {
			return fmt.Errorf("ceiling: start the cluster: %w", err)
		}
		defer cl.Stop()
		c := ceilingRedis{mode: "cluster", url: cl.URL(), nodes: strings.Split(strings.TrimPrefix(cl.URL(), "redis-cluster://"), ",")}
		names, err := spreadModels(ctx, c.nodes, env.key)
		if err != nil {
			return fmt.Errorf("ceiling: place the models: %w", err)
		}
		env.models = names // the same names on one Redis: the runs compare
		setups = append(setups, c)
	}
	fmt.Fprintf(stdout, "ceiling: PRs from %s; models %s; upstream %s; %s per run; processes %v x %d; limiters %v; %s\n",
		env.src, strings.Join(env.models[:], ", "), set.upstream, set.run, set.procs, set.concurrency, set.limiters, strings.Join(modes(setups), " and "))
	rep := ceilingReport{Upstream: set.upstream, RunS: set.run.Seconds(), Cores: runtime.NumCPU(), Concurrency: set.concurrency, Models: env.models[:], Rate: set.rate}
	first := true
	for _, rd := range setups {
		for _, lim := range set.limiters {
			for _, p := range set.procs {
				idle := time.Duration(0)
				if first {
					idle = set.idle
					first = false
				}
				r, err := ceilingOnce(ctx, stdout, env, rd, lim, p, idle)
				if err != nil {
					return fmt.Errorf("ceiling %s %s x%d: %w", rd.mode, lim, p, err)
				}
				if r.Idle != nil {
					rep.Idle = r.Idle
					r.Idle = nil
				}
				rep.Runs = append(rep.Runs, r)
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
	}
	return writeCeiling(stdout, set.out, rep)
}

func modes(rs []ceilingRedis) []string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s (%d master%s)", r.mode, len(r.nodes), map[bool]string{true: "s"}[len(r.nodes) > 1]))
	}
	return out
}

// spreadModels names three models whose admission state (one hash tag
// each) lands on three different masters.
func spreadModels(ctx context.Context, nodes []string, key string) ([3]string, error) {
	var out [3]string
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: nodes})
	defer rdb.Close()
	shards, err := rdb.ClusterShards(ctx).Result()
	if err != nil {
		return out, err
	}
	master := func(slot int64) int { // the shard serving slot (-1: none)
		for i, sh := range shards {
			for _, r := range sh.Slots {
				if r.Start <= slot && slot <= r.End {
					return i
				}
			}
		}
		return -1
	}
	used := map[int]bool{}
	kinds := []string{"summary", "review", "chat"}
	for i := 0; i < 3; i++ {
		for n := 0; ; n++ {
			if n > 200 {
				return out, fmt.Errorf("no name for the %s model lands on a master of its own", kinds[i])
			}
			name := fmt.Sprintf("ceiling-%s-%d", kinds[i], n)
			tag := ratelimit.BucketTag(name, key)
			slot, err := rdb.ClusterKeySlot(ctx, tag).Result()
			if err != nil {
				return out, err
			}
			if m := master(slot); m >= 0 && !used[m] {
				used[m] = true
				out[i] = name
				break
			}
		}
	}
	return out, nil
}

// ceilingConfig is the configuration of one run: three models with the
// ceiling's limits under limiter, every GitHub write as fast as the write
// lane goes, no chat limits.
func ceilingConfig(env ceilingEnv, redisURL, limiter string) config.Config {
	cfg := harness.RunConfig(redisURL, 1, env.set.concurrency)
	cfg.AllowNoPersistence = true // flushed between runs: nothing in it is meant to last
	cfg.Models = nil
	for i, name := range env.models {
		out := int64(300)
		if i == 1 {
			out = 600
		}
		cfg.Models = append(cfg.Models, config.ModelConfig{Name: name, RequestsPerMinute: ceilingRequests, TokensPerMinute: ceilingTokens,
			MaxOutputTokens: out, Period: config.Duration(ceilingPeriod), Limiter: limiter})
	}
	cfg.Jobs = config.JobsConfig{SummaryModel: env.models[0], ReviewModel: env.models[1], ChatModel: env.models[2]}
	cfg.GitHub.WriteGap = 0
	cfg.Chat = config.ChatConfig{PerUserPerHour: config.IntPtr(0), PerPRPerHour: config.IntPtr(0)}
	return cfg
}

// ceilingTenants: ten installations per tier.
func ceilingTenants() map[int64]jobs.Tier {
	out := map[int64]jobs.Tier{}
	for i := int64(1); i <= 30; i++ {
		out[i] = jobs.Tiers[(i-1)%3]
	}
	return out
}

// ceilingOnce is one run: start the fakes, serve and the workers, let
// them idle (when idle > 0, for the idle figure), fill the backlog, and
// measure a window of the run's length.
func ceilingOnce(ctx context.Context, stdout io.Writer, env ceilingEnv, rd ceilingRedis, limiter string, procs int, idle time.Duration) (ceilingResult, error) {
	res := ceilingResult{Mode: rd.mode, Limiter: limiter, Processes: procs, Nodes: rd.nodes}
	nodes := make([]*redis.Client, len(rd.nodes))
	for i, a := range rd.nodes {
		nodes[i] = redis.NewClient(&redis.Options{Addr: a})
		defer nodes[i].Close()
		if err := nodes[i].FlushAll(ctx).Err(); err != nil {
			return res, fmt.Errorf("flush %s: %w", a, err)
		}
		nodes[i].ConfigResetStat(ctx)
	}
	opt, err := config.ParseRedisURL(rd.url)
	if err != nil {
		return res, err
	}
	rdb := opt.MakeRedisClient().(redis.UniversalClient) // the bench's own reads
	defer rdb.Close()
	cfg := ceilingConfig(env, rd.url, limiter)

	// the fakes, each measured by the CPU its handlers use
	gh := fakegithub.New(fakegithub.Config{AppID: 1, PublicKey: &env.appKey.PublicKey, WritesPerPeriod: -1})
	ghCPU := &cpuMeter{next: gh}
	ghURL, ghStop, err := harness.ListenServe(ghCPU)
	if err != nil {
		return res, err
	}
	defer ghStop()
	fakes := &harness.Fakes{GitHub: gh, GitHubURL: ghURL + "/api/v3/", KeyPEM: env.keyPEM, AppID: 1, APIKey: env.key}
	var oai *fakeopenai.Server
	oaiCPU := &cpuMeter{}
	if env.set.upstream == UpstreamFake {
		var models []fakeopenai.Model
		for _, m := range cfg.Models {
			models = append(models, fakeopenai.Model{Name: m.Name, RPM: ceilingRequests, TPM: ceilingTokens})
		}
		oai = fakeopenai.New(fakeopenai.Config{Models: models, Period: ceilingPeriod, Keys: []string{env.key}, Seed: env.set.seed})
		oaiCPU.next = oai
		u, stop, err := harness.ListenServe(oaiCPU)
		if err != nil {
			return res, err
		}
		defer stop()
		fakes.OpenAIURL = u + "/v1"
	} else {
		fakes.OpenAIURL = "http://127.0.0.1:9/v1" // each worker answers its own calls (--upstream noop)
	}
	fakes.Configure(&cfg, "prq-bench")
	cfg.Addr = "127.0.0.1:0"
	cfgFile := filepath.Join(env.set.out, "ceiling-config.yaml")
	yb, _ := yaml.Marshal(map[string]any{"models": cfg.Models, "jobs": cfg.Jobs, "tiers": cfg.Tiers, "log": cfg.Log, "shutdown_timeout": cfg.ShutdownTimeout,
		"worker": cfg.Worker, "scheduler": cfg.Scheduler, "chat": cfg.Chat, "github": map[string]any{"write_gap": cfg.GitHub.WriteGap}})
	if err := os.WriteFile(cfgFile, yb, 0o600); err != nil {
		return res, err
	}

	// serve, in this process, its client counted like the workers'
	sctx, stopServe := context.WithCancel(ctx)
	defer stopServe()
	s, err := server.New(sctx, &cfg, logging.New(io.Discard, cfg.Log), opt)
	if err != nil {
		return res, err
	}
	defer s.Close()
	serveTally := newRedisTally(newScriptNamer())
	s.Redis().AddHook(serveTally)
	tenants := ceilingTenants()
	for inst, t := range tenants {
		if err := s.Store().SetPlan(ctx, store.Plan{Installation: inst, Tier: t, Explicit: true}); err != nil {
			return res, err
		}
	}
	served := harness.Serve(sctx, s, io.Discard, server.Roles{HTTP: true}, server.Options{})
	if s.ListenAddr() == "" {
		return res, fmt.Errorf("serve did not start: %v", <-served)
	}
	var serveIdle float64
	if idle > 0 {
		serveIdle = idleRate(ctx, nodes, 2*time.Second)
	}

	// the workers
	tag := fmt.Sprintf("ceiling-%s-%s-%d", rd.mode, limiter, procs)
	var workers []*harness.Proc
	var records []string
	for i := 0; i < procs; i++ {
		rec := filepath.Join(env.set.out, fmt.Sprintf("%s-worker%d.json", tag, i))
		os.Remove(rec)
		records = append(records, rec)
		p, err := harness.StartProc(env.set.exe, []string{"bench-worker", "--strategy", StrategyPrq, "--processes", strconv.Itoa(procs), "--record", rec,
			"--config", cfgFile, "--concurrency", strconv.Itoa(env.set.concurrency), "--tally", "--upstream", env.set.upstream},
			append(fakes.WorkerEnv(rd.url, "prq-bench"), "PRQ_ALLOW_NO_PERSISTENCE=true"), filepath.Join(env.set.out, fmt.Sprintf("%s-worker%d.log", tag, i)))
		if err != nil {
			return res, err
		}
		workers = append(workers, p)
	}
	stopWorkers := func() {
		for _, p := range workers {
			p.Signal(syscall.SIGTERM)
		}
		for _, p := range workers {
			p.Wait(30 * time.Second)
		}
		workers = nil
	}
	defer stopWorkers()
	if err := waitWorkers(ctx, s, procs, 30*time.Second); err != nil {
		return res, fmt.Errorf("%w (see %s-worker*.log)", err, filepath.Join(env.set.out, tag))
	}
	time.Sleep(time.Second) // past their first polls and heartbeats
	var idleFrom, idleTo time.Time
	if idle > 0 {
		fmt.Fprintf(stdout, "ceiling %s: %d idle worker process(es) for %s\n", tag, procs, idle)
		idleFrom = time.Now()
		rate := idleRate(ctx, nodes, idle)
		idleTo = time.Now()
		res.Idle = &idleFigures{WindowS: idleTo.Sub(idleFrom).Seconds(), Processes: procs, ServeCmdsPerS: serveIdle,
			RedisCmdsPerSPerWorker: (rate - serveIdle) / float64(procs)}
	}

	// the load, then the measured window
	d := newCeilingDriver(s, gh, &traffic.Sender{URL: "http://" + s.ListenAddr() + "/webhook", Secret: []byte(cfg.GitHub.WebhookSecret)},
		rdb, env.prs, tenants, env.models[:], env.set.rate, env.set.chatsPerPR, env.set.seed)
	dctx, stopDriver := context.WithCancel(ctx)
	driven := make(chan struct{})
	go func() { d.run(dctx); close(driven) }()
	warm := time.Now()
	// warm up: two seconds, and until the backlog is full (kept full) or
	// three seconds (at a set rate)
	for time.Since(warm) < 2*time.Second || (env.set.rate == 0 && d.backlogNow() < d.target() && time.Since(warm) < 10*time.Second) ||
		(env.set.rate > 0 && time.Since(warm) < 3*time.Second) {
		if ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	w := ceilingWindow{Cores: runtime.NumCPU(), Nodes: rd.nodes, Open: env.set.rate > 0}
	pids := make([]string, len(workers))
	for i, p := range workers {
		pids[i] = strconv.Itoa(p.Pid())
	}
	start := sampleCeiling(ctx, nodes, pids, ghCPU, oaiCPU)
	w.From = start.at
	time.Sleep(env.set.run)
	end := sampleCeiling(ctx, nodes, pids, ghCPU, oaiCPU)
	w.To = end.at
	stopDriver()
	<-driven
	w.setCPU(start, end)
	w.Backlog = d.backlogBetween(w.From, w.To)
	w.PRsSent = d.prsBetween(w.From, w.To)
	res.PRsSent, res.ChatsSent, res.WebhookErrors = d.counts()
	fmt.Fprintf(stdout, "ceiling %s: measured %s; stopping\n", tag, w.To.Sub(w.From).Round(time.Millisecond))
	stopWorkers()
	stopServe()
	<-served

	// what the workers and serve recorded
	tallies := [][]tallyRow{serveTally.rows()}
	for _, rf := range records {
		bb, err := os.ReadFile(rf)
		if err != nil {
			return res, fmt.Errorf("a worker wrote no report (%w): see its log", err)
		}
		var wr workerReport
		if err := json.Unmarshal(bb, &wr); err != nil {
			return res, fmt.Errorf("worker report %s: %w", rf, err)
		}
		tallies = append(tallies, wr.Tally)
		w.addCalls(wr.Calls)
		w.addWaits(wr.Waits)
		if res.Idle != nil {
			c, sc := tallyWindow(wr.Tally, idleFrom, idleTo)
			res.Idle.addWorker(c, sc)
		}
	}
	w.Scripts = map[string]int64{}
	for _, rows := range tallies {
		_, sc := tallyWindow(rows, w.From, w.To)
		for k, v := range sc {
			w.Scripts[k] += v
		}
		w.Upstream += time.Duration(tallyKind(rows, "cpu", "upstream", w.From, w.To))
	}
	if oai != nil {
		for _, st := range oai.Stats() {
			res.Provider429s += st.RateLimited
		}
	}
	res.ceilingFigures = w.figures()
	fmt.Fprintf(stdout, "ceiling %s: %.0f LLM calls/s, Redis %.2f core, %.0f commands/call, %.3f ms Redis CPU/call; %s\n",
		tag, res.CallsPerS, res.maxRedisCores(), res.CmdsPerCall, res.RedisCPUMsPerCall, res.Verdict)
	return res, nil
}

// waitWorkers waits until the processes' asynq servers have announced
// themselves.
func waitWorkers(ctx context.Context, s *server.Server, procs int, d time.Duration) error {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		srv, _ := s.Inspector().Servers()
		pids := map[int]bool{}
		for _, x := range srv {
			pids[x.PID] = true
		}
		if len(pids) >= procs {
			return nil
		}
	}
	return fmt.Errorf("the worker processes did not start within %s", d)
}

// idleRate is Redis's commands per second over d, summed over the nodes
// (one INFO per node per reading subtracted).
func idleRate(ctx context.Context, nodes []*redis.Client, d time.Duration) float64 {
	var a, b []redisSample
	for _, n := range nodes {
		a = append(a, sampleRedis(ctx, n))
	}
	time.Sleep(d)
	for _, n := range nodes {
		b = append(b, sampleRedis(ctx, n))
	}
	var cmds int64
	for i := range nodes {
		cmds += b[i].cmds - a[i].cmds - 1
	}
	return float64(cmds) / b[0].at.Sub(a[0].at).Seconds()
}

// ceilingSample is one reading of everything the ceiling measures.
type ceilingSample struct {
	at       time.Time
	redis    []redisSample
	workers  time.Duration // CPU, summed over the worker processes
	self     time.Duration // this process: serve, the fakes, the driver
	github   time.Duration // the fake GitHub's handlers
	provider time.Duration // the fake provider's handlers
	machine  machineCPU
}

func sampleCeiling(ctx context.Context, nodes []*redis.Client, pids []string, gh, oai *cpuMeter) ceilingSample {
	s := ceilingSample{at: time.Now()}
	for _, n := range nodes {
		s.redis = append(s.redis, sampleRedis(ctx, n))
	}
	for _, p := range pids {
		if c, err := procCPU(p); err == nil {
			s.workers += c
		}
	}
	s.self, _ = procCPU("self")
	s.github, s.provider = gh.used(), oai.used()
	s.machine, _ = readMachineCPU()
	return s
}

// ceilingDriver keeps the held backlog full (or, with a rate, sends PRs
// at that rate): pull requests from the corpus, each a new one of a
// tenant, and chat comments on PRs already sent so the chat model has
// work too.
type ceilingDriver struct {
	s       *server.Server
	gh      *fakegithub.Server
	sender  *traffic.Sender
	rdb     redis.UniversalClient
	prs     []corpus.PR
	insts   []int64
	tenants map[int64]jobs.Tier
	models  []string
	rate    float64
	rng     *mrand.Rand

	perPR, chatsPerPR float64 // calls a PR makes and chats per PR (estimates: pacing only)

	mu          sync.Mutex
	samples     []backlogSample
	admRate     float64
	sentPRs     int
	sentAt      []time.Time // each PR's
	sentChats   int
	webhookErrs int
	recent      []jobs.PR
	number      int
	chatID      int64
	sends       chan webhookSend
}

type backlogSample struct {
	at      time.Time
	backlog int64
}

type webhookSend struct {
	event string
	body  []byte
}

func newCeilingDriver(s *server.Server, gh *fakegithub.Server, sender *traffic.Sender, rdb redis.UniversalClient, prs []corpus.PR,
	tenants map[int64]jobs.Tier, models []string, rate, chatsPerPR float64, seed int64) *ceilingDriver {
	d := &ceilingDriver{s: s, gh: gh, sender: sender, rdb: rdb, tenants: tenants, models: models, rate: rate, rng: mrand.New(mrand.NewSource(seed)),
		sends: make(chan webhookSend, 1024), number: 1, chatID: 9_000_000}
	for _, p := range prs {
		if len(p.Files) > 0 {
			d.prs = append(d.prs, p)
		}
	}
	for i := int64(1); i <= int64(len(tenants)); i++ {
		d.insts = append(d.insts, i)
	}
	// a PR makes a summary per file, and a review per file where its tier
	// reviews (two tiers of three); unless told, chat gets about as many
	// calls as reviews
	files := 0
	for _, p := range d.prs {
		files += len(p.Files)
	}
	f := float64(files) / float64(max(len(d.prs), 1))
	d.chatsPerPR = chatsPerPR
	if chatsPerPR < 0 {
		d.chatsPerPR = f * 2 / 3
	}
	d.perPR = f + f*2/3 + d.chatsPerPR
	return d
}

// target is the backlog the driver keeps: half a second of admissions,
// at least 200 tickets. A saturated run needs some backlog at every
// moment (the report says when it ran empty); more only lengthens every
// ticket's wait (Little's law), which the admission latency would show.
func (d *ceilingDriver) target() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return max(200, int64(d.admRate/2))
}

func (d *ceilingDriver) backlogNow() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.samples) == 0 {
		return 0
	}
	return d.samples[len(d.samples)-1].backlog
}

func (d *ceilingDriver) backlogBetween(from, to time.Time) []int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []int64
	for _, s := range d.samples {
		if !s.at.Before(from) && s.at.Before(to) {
			out = append(out, s.backlog)
		}
	}
	return out
}

func (d *ceilingDriver) prsBetween(from, to time.Time) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var n int64
	for _, at := range d.sentAt {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}

func (d *ceilingDriver) counts() (prs, chats, errs int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sentPRs, d.sentChats, d.webhookErrs
}

func (d *ceilingDriver) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range d.sends {
				code, err := d.sender.Send(ctx, w.event, traffic.NewDelivery(), w.body)
				if (err != nil || code >= 300) && ctx.Err() == nil {
					d.mu.Lock()
					d.webhookErrs++
					d.mu.Unlock()
				}
			}
		}()
	}
	defer func() { close(d.sends); wg.Wait() }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var lastAdm int64
	var lastAt time.Time
	var backlog, planned int64
	acc := 0.0
	for k := 0; ; k++ {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if k%3 == 0 { // the backlog every 300 ms: its reads are Redis load too
				var adm int64
				backlog, adm, planned = d.sample(ctx)
				d.mu.Lock()
				d.samples = append(d.samples, backlogSample{at: now, backlog: backlog})
				if !lastAt.IsZero() && adm >= lastAdm {
					r := float64(adm-lastAdm) / now.Sub(lastAt).Seconds()
					d.admRate = 0.7*d.admRate + 0.3*r
				}
				d.mu.Unlock()
				lastAdm, lastAt = adm, now
			}
			n := 0
			if d.rate > 0 {
				acc += d.rate * 0.1
				n = int(acc)
				acc -= float64(n)
			} else if need := float64(d.target()-backlog) - float64(planned)*d.perPR; need > 0 {
				// PRs whose plans have not run yet count with the
				// tickets they will bring
				n = min(100, int(need/d.perPR)+1)
				planned += int64(n)
			}
			for i := 0; i < n && ctx.Err() == nil; i++ {
				d.sendPR(ctx)
			}
		}
	}
}

// sample reads the held backlog (waiting tickets and admitted tasks not
// yet started, every model), the admissions so far, and the tasks in
// asynq's pending lists that are not released work: plans (and
// finalizes) not yet started. Its reads are not tallied.
func (d *ceilingDriver) sample(ctx context.Context) (backlog, admitted, plans int64) {
	ctx = untallied(ctx)
	var released int64
	for _, m := range d.models {
		st, err := d.s.Scheduler().Stats(ctx, m)
		if err != nil {
			continue
		}
		for _, n := range st.Backlog {
			backlog += n
		}
		backlog += st.Released
		released += st.Released
		for _, n := range st.AdmJobs {
			admitted += n
		}
	}
	var pending int64
	for _, q := range jobs.Queues {
		pending += d.rdb.LLen(ctx, "asynq:{"+q+"}:pending").Val() // asynq's pending list (keys asynq:{<queue>}:…)
	}
	return backlog, admitted, max(pending-released, 0)
}

func (d *ceilingDriver) send(ctx context.Context, event string, body []byte) {
	select {
	case d.sends <- webhookSend{event, body}:
	case <-ctx.Done():
	}
}

// sendPR opens a new pull request of the next tenant with the next
// corpus PR's files, and the chats that go with it.
func (d *ceilingDriver) sendPR(ctx context.Context) {
	d.mu.Lock()
	n := d.number
	d.number++
	p := d.prs[n%len(d.prs)]
	if pass := n / len(d.prs); pass > 0 {
		// a later pass over the corpus is other work: its repositories
		// are named apart, so no prompt repeats and no job is answered
		// from a kept result (each admitted job a call, as the figures
		// per call assume)
		p.Repo += "-" + strconv.Itoa(pass)
	}
	inst := d.insts[n%len(d.insts)]
	d.sentPRs++
	d.sentAt = append(d.sentAt, time.Now())
	d.mu.Unlock()
	owner := fmt.Sprintf("tenant-%d", inst)
	p.Number = n
	p.HeadSHA = fmt.Sprintf("%016x%016x%08x", d.rng.Uint64(), d.rng.Uint64(), d.rng.Uint32())
	d.gh.AddPR(inst, owner, p.Name(), p)
	d.send(ctx, "pull_request", traffic.PullRequestEvent("opened", traffic.PR{Installation: inst, Owner: owner, Repo: p.Name(), Number: n, Title: p.Title, Head: p.HeadSHA, Base: p.BaseSHA}))
	pr := jobs.PR{Installation: inst, Owner: owner, Repo: p.Name(), Number: n}
	d.mu.Lock()
	d.recent = append(d.recent, pr)
	if len(d.recent) > 2000 {
		d.recent = d.recent[1000:]
	}
	chats := int(d.chatsPerPR)
	if d.rng.Float64() < d.chatsPerPR-float64(chats) {
		chats++
	}
	var targets []jobs.PR
	var ids []int64
	for k := 0; k < chats && len(d.recent) > 50; k++ {
		targets = append(targets, d.recent[d.rng.Intn(len(d.recent)-50)]) // PRs sent a while ago
		d.chatID++
		ids = append(ids, d.chatID)
	}
	d.sentChats += len(targets)
	d.mu.Unlock()
	for k, t := range targets {
		d.send(ctx, "issue_comment", traffic.IssueCommentEvent(traffic.Comment{Installation: t.Installation, Owner: t.Owner, Repo: t.Repo, Number: t.Number,
			ID: ids[k], Author: "dev", Body: "@prq-bench is this change safe?"}))
	}
}
