// Package chaos proves prq survives failure under load: it runs serve in
// this process and workers as child processes against a real Redis (or a
// local Redis Cluster) and the fakes, kills workers with SIGKILL, stops
// them past asynq's lease, restarts or kills Redis, soaks, and then checks
// that every accepted PR was published exactly once and no job was lost.
// It owns the scenarios and their report, not the fakes or processes
// (internal/harness) or Redis (internal/redisproc).
package chaos

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"gopkg.in/yaml.v3"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/harness"
	"github.com/prq-dev/prq/internal/logging"
	"github.com/prq-dev/prq/internal/quantile"
	"github.com/prq-dev/prq/internal/redisproc"
	"github.com/prq-dev/prq/internal/server"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// Flags are the chaos run's settings.
type Flags struct {
	scenarios  string
	prs        int
	processes  int
	kills      int
	killEvery  time.Duration
	compress   float64
	seed       int64
	out        string
	corpus     string
	fsync      string
	timeout    time.Duration
	stallFor   time.Duration
	arrivalFor time.Duration
	exe        string
	latency    float64
	soak       time.Duration
	// soakKB is the documented bound of Redis memory per retained pull
	// request after a soak, KB
	soakKB float64
	// lifecycle: sequences, events per sequence, and the share (percent)
	// of events that kill a worker
	sequences   int
	steps       int
	killPercent int
	// providerHang is the share of provider calls that hang: the fake
	// takes them and sends nothing, not even headers
	providerHang float64
	// firstByte is the workers' openai.first_byte_timeout (0: the
	// default scaled by latency, as the provider's latencies are)
	firstByte time.Duration
	// gitlabTenants are GitLab groups beside the nine installations,
	// their merge requests a share of the workload
	gitlabTenants int
}

// Register adds the chaos run's flags to fs.
func (c *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.scenarios, "scenarios", "crash,stall,redis-restart,redis-kill,cluster", "scenarios to run, comma-separated")
	fs.IntVar(&c.prs, "prs", 200, "pull requests per scenario")
	fs.IntVar(&c.processes, "processes", 3, "worker processes")
	fs.IntVar(&c.kills, "kills", 20, "crash: how many workers to kill -9 (each restarted)")
	fs.DurationVar(&c.killEvery, "kill-every", 3*time.Second, "crash: time between kills")
	fs.Float64Var(&c.compress, "compress", 20, "time compression of the provider's limits and latencies")
	fs.Int64Var(&c.seed, "seed", 1, "seed")
	fs.StringVar(&c.out, "out", "chaos-out", "directory for the worker and Redis logs")
	fs.StringVar(&c.corpus, "corpus", "", "prs.jsonl (default: ../shared/fixtures/pr-corpus when present, else generated PRs)")
	fs.StringVar(&c.fsync, "appendfsync", "always", "redis-kill: Redis's appendfsync (always or everysec)")
	fs.DurationVar(&c.timeout, "timeout", 6*time.Minute, "give up a scenario after this long")
	fs.DurationVar(&c.stallFor, "stall-for", 40*time.Second, "stall: how long a worker stays SIGSTOPped (past asynq's 30 s lease)")
	fs.DurationVar(&c.arrivalFor, "arrivals", 20*time.Second, "how long the webhooks take to arrive")
	fs.StringVar(&c.exe, "worker-binary", "", "the prq binary to run workers with (default: this one)")
	fs.DurationVar(&c.soak, "soak-for", 5*time.Minute, "soak: how long the steady arrivals last")
	fs.Float64Var(&c.soakKB, "soak-kb-per-pr", soakKBPerPR, "soak: the bound of Redis memory per retained pull request after the drain, KB; more than 10% over it is a problem")
	fs.Float64Var(&c.latency, "latency-scale", 0.5, "provider latency scale (1: summaries ~0.8 s, reviews ~8 s), so kills catch jobs in flight")
	fs.IntVar(&c.sequences, "sequences", 20, "lifecycle: seeded sequences to play (seeds --seed, --seed+1, ...)")
	fs.IntVar(&c.steps, "steps", 20, "lifecycle: life-cycle events per sequence")
	fs.IntVar(&c.killPercent, "kill-percent", 3, "lifecycle: percent of events that kill -9 a worker (each waits out asynq's lease, about 90 s)")
	fs.Float64Var(&c.providerHang, "provider-hang", 0, "share (0..1) of provider calls that hang: taken, then nothing sent, not even headers")
	fs.IntVar(&c.gitlabTenants, "gitlab-tenants", 0, "GitLab groups (on a fake GitLab) beside the 9 GitHub installations: each takes a share of the merge requests (opened, pushed to, chat and commands through signed webhooks)")
	fs.DurationVar(&c.firstByte, "first-byte-timeout", 0, "the workers' openai.first_byte_timeout (default: its default times --latency-scale, as the provider's latencies are scaled)")
}

// chaosReport is what one scenario found.
type chaosReport struct {
	Scenario       string
	PRs, Published int
	Reviews        int
	WantReviews    int
	Duplicates     int
	Lost           int
	Archived       int
	Accepted       int
	Kills          int
	Recovery       []time.Duration
	Unavailable503 int
	ReadyzDown     bool
	Elapsed        time.Duration
	// LastKill is when the scenario's last worker was killed, LastHang
	// when the provider last hung a call; Drained when every accepted PR
	// was published and no job was left queued
	LastKill, LastHang, Drained time.Time
	Hung                        int64 // provider calls the fake hung
	Problems                    []string
	ProviderLimited             int64
	Checked                     []string
	// soak: samples during the arrivals, Redis memory before and after,
	// the bound per retained PR (bytes), and the prq keys found without
	// a TTL after the drain (the documented permanent ones aside)
	Samples              []soakSample
	Baseline, AfterDrain int64
	BoundPerPR           float64
	NoTTL                int
	// GitLab is what the GitLab tenants' merge requests got (nil: none)
	GitLab *glReport
}

// soakKBPerPR is the documented bound of Redis dataset memory per pull
// request a soak leaves behind (its run, files and patches, results, what
// was posted, finished task records: kept for retention), in KB, for the
// soak's workload: the corpus's PRs of 1 to 30 files (3.5 files and 7.8 KB
// of patches on average). Measured: 22.2 KB (docs/reliability.md). An earlier 16 KB
// came from a baseline taken while the workers still connected.
const soakKBPerPR = 24.0

// checkSoak holds a soak to its bounds: Redis memory per retained PR
// within 10% of BoundPerPR, and no prq key without a TTL (missing, from
// the scan, which failed with scanErr).
func (r *chaosReport) checkSoak(missing []string, scanErr error) {
	if per := r.soakPerPR(); per > r.BoundPerPR*1.1 {
		r.Problems = append(r.Problems, fmt.Sprintf("Redis keeps %.1f KB per retained PR after the drain, over the bound of %.1f KB by more than 10%%", per/1024, r.BoundPerPR/1024))
	}
	r.NoTTL = len(missing)
	switch {
	case scanErr != nil:
		r.Problems = append(r.Problems, "scan for keys without a TTL: "+scanErr.Error())
	case len(missing) > 0:
		r.Problems = append(r.Problems, fmt.Sprintf("%d prq keys without a TTL after the soak: %s", len(missing), strings.Join(missing[:min(len(missing), 5)], " ")))
	}
}

// soakPerPR is the Redis memory the soak left per retained PR, bytes.
func (r chaosReport) soakPerPR() float64 {
	return float64(r.AfterDrain-r.Baseline) / float64(max(r.PRs, 1))
}

type soakSample struct {
	At         time.Duration
	WorkerRSS  int64 // largest worker's resident set, bytes
	Goroutines int   // the serve process's
	RedisMem   int64
}

// usedMemory is Redis's dataset memory (used_memory_dataset: keys and
// values), what retained pull requests cost: used_memory also counts
// client buffers and the script cache, which follow the connections and
// scripts loaded, not the data.
func usedMemory(ctx context.Context, s *server.Server) int64 {
	return harness.RedisInfoInt(ctx, s.Redis(), "memory", "used_memory_dataset")
}

// steadyMemory is a soak's baseline: Redis memory once every worker
// process's asynq servers (two each) have registered and it has stopped
// moving (two samples a second apart within 1%), not while workers still
// connect (that moment varied by 1.4 MB between runs). After 20 s it
// stops waiting and returns the last sample.
func steadyMemory(ctx context.Context, a *server.Server, servers int) int64 {
	deadline := time.Now().Add(20 * time.Second)
	prev := int64(-1)
	for {
		m := usedMemory(ctx, a)
		up := 0
		if ss, err := a.Inspector().Servers(); err == nil {
			up = len(ss)
		}
		if up >= servers && prev > 0 && max(m-prev, prev-m) <= prev/100 || time.Now().After(deadline) || ctx.Err() != nil {
			return m
		}
		prev = m
		time.Sleep(time.Second)
	}
}

// Usage describes the chaos command.
const Usage = "Proves prq survives: kills, stalls and Redis restarts under load, with real processes, a real Redis and the fake provider and GitHub. Prints what it found; exits non-zero on any lost or duplicated work."

// Run runs the scenarios and prints what each found; it fails on any
// lost or duplicated work.
func Run(ctx context.Context, c Flags, stdout io.Writer) error {
	if c.prs <= 0 || c.processes <= 0 || c.compress <= 0 || !(c.soakKB > 0) {
		return &config.UsageError{Msg: "--prs, --processes, --compress and --soak-kb-per-pr must be positive"}
	}
	if c.gitlabTenants < 0 || c.gitlabTenants > 100 {
		return &config.UsageError{Msg: "--gitlab-tenants must be within 0..100"}
	}
	if !(c.providerHang >= 0 && c.providerHang <= 1) {
		return &config.UsageError{Msg: "--provider-hang must be within 0..1"}
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	failed := false
	for _, sc := range config.SplitList(c.scenarios) {
		if sc == "lifecycle" {
			if c.sequences <= 0 || c.steps <= 0 || c.killPercent < 0 || c.killPercent > 16 {
				return &config.UsageError{Msg: "--sequences and --steps must be positive, --kill-percent within 0..16"}
			}
			if err := lifecycle(ctx, c, stdout); err != nil {
				fmt.Fprintln(stdout, err)
				failed = true
			}
			continue
		}
		rep, err := chaosScenario(ctx, c, sc)
		if err != nil {
			return fmt.Errorf("chaos %s: %w", sc, err)
		}
		printChaos(stdout, rep)
		if len(rep.Problems) > 0 {
			failed = true
		}
	}
	if failed {
		return fmt.Errorf("chaos found lost or duplicated work")
	}
	return nil
}

func printChaos(w io.Writer, r chaosReport) {
	fmt.Fprintf(w, "chaos %s: %d/%d PRs published, %d/%d reviews, %d duplicates, %d jobs lost, %d archived, %d deliveries accepted, %s\n",
		r.Scenario, r.Published, r.PRs, r.Reviews, r.WantReviews, r.Duplicates, r.Lost, r.Archived, r.Accepted, r.Elapsed.Round(time.Second))
	if !r.LastKill.IsZero() {
		fmt.Fprintf(w, "  drain after the last kill: %s", r.Drained.Sub(r.LastKill).Round(time.Second))
		if r.Hung > 0 {
			fmt.Fprintf(w, "; after the last fault (a kill or a hang): %s; provider calls hung: %d", r.Drained.Sub(latest(r.LastKill, r.LastHang)).Round(time.Second), r.Hung)
		}
		fmt.Fprintln(w)
	}
	if r.Kills > 0 {
		p50, p99, mx := quantile.Of(r.Recovery, .5), quantile.Of(r.Recovery, .99), quantile.Of(r.Recovery, 1)
		fmt.Fprintf(w, "  %d kill -9; %d jobs were running in killed workers; recovery (kill to the job running again or done): p50 %s, p99 %s, max %s\n",
			r.Kills, len(r.Recovery), p50.Round(100*time.Millisecond), p99.Round(100*time.Millisecond), mx.Round(100*time.Millisecond))
	}
	if r.Unavailable503 > 0 || r.ReadyzDown {
		fmt.Fprintf(w, "  during the Redis outage: /readyz reported it: %v; webhooks answered 503: %d (none answered 2xx unsaved)\n", r.ReadyzDown, r.Unavailable503)
	}
	if len(r.Samples) > 0 {
		first, last := r.Samples[min(1, len(r.Samples)-1)], r.Samples[len(r.Samples)-1]
		var maxRSS int64
		maxG := 0
		for _, x := range r.Samples {
			maxRSS, maxG = max(maxRSS, x.WorkerRSS), max(maxG, x.Goroutines)
		}
		fmt.Fprintf(w, "  soak: worker RSS %.0f MB at %s, %.0f MB at %s, max %.0f MB; serve goroutines %d -> %d (max %d)\n",
			float64(first.WorkerRSS)/(1<<20), first.At.Round(time.Second), float64(last.WorkerRSS)/(1<<20), last.At.Round(time.Second), float64(maxRSS)/(1<<20),
			first.Goroutines, last.Goroutines, maxG)
		fmt.Fprintf(w, "  soak: Redis dataset memory %.1f MB before, %.1f MB at the end of arrivals, %.1f MB after the drain (runs live %s, finished plan and chat tasks 72 h)\n",
			float64(r.Baseline)/(1<<20), float64(last.RedisMem)/(1<<20), float64(r.AfterDrain)/(1<<20), "14 days")
		fmt.Fprintf(w, "  soak: (after the drain − before) / %d retained PRs = %.1f KB per PR; bound %.1f KB, a problem past %.1f KB (+10%%); %d prq keys without a TTL (documented permanent ones aside)\n",
			r.PRs, r.soakPerPR()/1024, r.BoundPerPR/1024, r.BoundPerPR*1.1/1024, r.NoTTL)
	}
	if g := r.GitLab; g != nil {
		fmt.Fprintf(w, "  gitlab: %d merge requests (%d pushes, %d chats, %d commands, %d deliveries sent twice): %d/%d with one summary note, %d/%d with one review round on the final head, %d diff notes, %d/%d commit statuses finished, %d/%d notes answered once, %d quick actions run for the bot, %d live references\n",
			g.MRs, g.Pushes, g.Chats, g.Commands, g.Redelivered, g.Summaries, g.MRs, g.FinalRounds, g.WantRounds, g.DiffNotes, g.StatusesDone, g.Statuses, g.Answers, g.WantAnswers, g.QuickActions, g.LiveRefs)
	}
	for _, c := range r.Checked {
		fmt.Fprintf(w, "  limiter on the cluster: %s\n", c)
	}
	if r.ProviderLimited > 0 {
		fmt.Fprintf(w, "  provider 429s: %d\n", r.ProviderLimited)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  PROBLEM: %s\n", p)
	}
}

// chaosRun is the system under test: serve in this process, workers as
// processes that can be killed, stopped and restarted.
type chaosRun struct {
	c       Flags
	cfgFile string
	env     []string
	mu      sync.Mutex
	procs   []*harness.Proc
	n       int
}

func (r *chaosRun) spawn(i int) error {
	exe, err := harness.Executable(r.c.exe)
	if err != nil {
		return err
	}
	r.n++
	p, err := harness.StartProc(exe, []string{"worker", "--config", r.cfgFile}, r.env, filepath.Join(r.c.out, fmt.Sprintf("worker%d-%d.log", i, r.n)))
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.procs[i] = p
	r.mu.Unlock()
	return nil
}

func chaosScenario(ctx context.Context, c Flags, scenario string) (chaosReport, error) {
	rep := chaosReport{Scenario: scenario}
	switch scenario {
	case "crash", "stall", "redis-restart", "redis-kill", "cluster", "soak":
	default:
		return rep, &config.UsageError{Msg: fmt.Sprintf("unknown scenario %q (want crash, stall, redis-restart, redis-kill, cluster, soak or lifecycle)", scenario)}
	}
	fsync := "everysec"
	if scenario == "redis-kill" {
		fsync = c.fsync
	}
	var srv *redisproc.Server
	var redisURL string
	if scenario == "cluster" {
		cl, err := redisproc.StartCluster(ctx)
		if err != nil {
			return rep, err
		}
		defer cl.Stop()
		redisURL = cl.URL()
	} else {
		var err error
		srv, err = redisproc.Start("--appendonly", "yes", "--appendfsync", fsync)
		if err != nil {
			return rep, err
		}
		defer srv.Stop()
		redisURL = srv.URL()
	}
	cfg := harness.RunConfig(redisURL, c.compress, 20)
	// roomy limits: the point is failure, not the bucket
	for i := range cfg.Models {
		cfg.Models[i].TokensPerMinute *= 4
	}
	fakes, err := harness.StartFakes(&cfg, c.compress, "sk-chaos-"+harness.RandomHex(8), c.seed, scenario == "cluster")
	if err != nil {
		return rep, err
	}
	defer fakes.Close()
	fakes.OpenAI.SetLatencyScale(c.latency)
	tiers := []jobs.Tier{jobs.TierPaid, jobs.TierTrial, jobs.TierFree}
	var gl *gitlabSide
	if c.gitlabTenants > 0 {
		if gl, err = startGitLabSide(&cfg, c.gitlabTenants, tiers, c.seed); err != nil {
			return rep, err
		}
		defer gl.stop()
		// the model writes what an injected prompt makes it write,
		// GitLab's quick actions and references included
		fakes.OpenAI.SetReplies(fakeopenai.ReplyInjectGitLab)
	}
	if c.providerHang > 0 {
		// the hang outlasts the run: only the caller's limits end it
		fakes.OpenAI.SetFaults(fakeopenai.Faults{Timeout: c.providerHang, TimeoutAfter: "1h"})
	}
	fakes.Configure(&cfg, "prq-chaos")
	cfg.Addr = "127.0.0.1:0"
	cfgFile := filepath.Join(c.out, "chaos-config.yaml")
	if cfg.OpenAI.FirstByteTimeout = config.Duration(c.firstByte); c.firstByte <= 0 {
		cfg.OpenAI.FirstByteTimeout = config.Duration(float64(config.Default().OpenAI.FirstByteTimeout) * c.latency)
	}
	wcfg := map[string]any{"models": cfg.Models, "jobs": cfg.Jobs, "tiers": cfg.Tiers, "log": config.LogConfig{Format: "json", Level: "info"},
		"openai":           map[string]any{"first_byte_timeout": cfg.OpenAI.FirstByteTimeout},
		"shutdown_timeout": cfg.ShutdownTimeout, "worker": cfg.Worker, "github": map[string]any{"write_gap": cfg.GitHub.WriteGap}}
	if gl != nil {
		wcfg["gitlab"] = gl.workerConfig(cfg.GitLab)
	}
	yb, _ := yaml.Marshal(wcfg)
	if err := os.WriteFile(cfgFile, yb, 0o600); err != nil {
		return rep, err
	}
	r := &chaosRun{c: c, cfgFile: cfgFile, procs: make([]*harness.Proc, c.processes), env: fakes.WorkerEnv(redisURL, "prq-chaos")}
	if scenario == "cluster" { // its nodes run without AOF: the scenario is about failover of the client, not durability
		cfg.AllowNoPersistence = true
		r.env = append(r.env, "PRQ_ALLOW_NO_PERSISTENCE=true")
	}
	// serve, in this process
	sctx, stopServe := context.WithCancel(ctx)
	defer stopServe()
	opt, _ := config.ParseRedisURL(redisURL)
	logf, _ := os.Create(filepath.Join(c.out, scenario+"-serve.log"))
	defer logf.Close()
	a, err := server.New(sctx, &cfg, logging.New(logf, config.LogConfig{Format: "json", Level: "info"}), opt)
	if err != nil {
		return rep, err
	}
	defer a.Close()
	served := harness.Serve(sctx, a, io.Discard, server.Roles{HTTP: true}, server.Options{})
	for i := 0; i < c.processes; i++ {
		if err := r.spawn(i); err != nil {
			return rep, err
		}
	}
	defer func() {
		for _, p := range r.procs {
			if p != nil {
				p.Signal(syscall.SIGCONT)
				p.Signal(syscall.SIGTERM)
			}
		}
		time.Sleep(2 * time.Second)
		for _, p := range r.procs {
			if p != nil {
				p.Kill()
			}
		}
	}()
	// the workload: PRs across tiers and tenants
	prs, _, err := harness.LoadPRs(c.corpus, max(200, c.prs), c.seed)
	if err != nil {
		return rep, err
	}
	rng := rand.New(rand.NewSource(c.seed))
	for inst := int64(1); inst <= 9; inst++ {
		a.Store().SetPlan(ctx, store.Plan{Installation: inst, Tier: tiers[inst%3], Explicit: true})
	}
	type sentPR struct {
		pr     jobs.PR
		tier   jobs.Tier
		review bool
		ok     bool
	}
	var sent []sentPR
	sender := &traffic.Sender{URL: "http://" + a.ListenAddr() + "/webhook", Secret: []byte(cfg.GitHub.WebhookSecret)}
	if scenario == "soak" {
		rep.Baseline = steadyMemory(ctx, a, 2*c.processes)
	}
	start := time.Now()
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		r.inject(ctx, scenario, srv, a, sender, &rep)
	}()
	arrivals := c.arrivalFor
	if scenario == "soak" {
		arrivals = c.soak
	}
	interval := arrivals / time.Duration(c.prs)
	for i := 0; i < c.prs; i++ {
		p := prs[rng.Intn(len(prs))]
		for len(p.Files) == 0 || len(p.Files) > 30 {
			p = prs[rng.Intn(len(prs))]
		}
		inst := int64(1 + rng.Intn(9+c.gitlabTenants))
		p.Number, p.HeadSHA = 1000+i, harness.RandomHex(40)
		if gl != nil {
			glURL := "http://" + a.ListenAddr() + "/webhook/gitlab"
			if inst > 9 {
				gl.open(ctx, glURL, int(inst-9), i, p, cfg.Filters.Exclude, &rep)
			}
			gl.followUps(ctx, glURL, i, prs, cfg.Filters.Exclude, &rep)
			if inst > 9 {
				time.Sleep(interval)
				continue
			}
		}
		owner := fmt.Sprintf("tenant-%d", inst)
		fakes.GitHub.AddPR(inst, owner, p.Name(), p)
		pr := jobs.PR{Installation: inst, Owner: owner, Repo: p.Name(), Number: p.Number}
		body := traffic.PullRequestEvent("opened", traffic.PR{Installation: inst, Owner: owner, Repo: p.Name(), Number: p.Number, Head: p.HeadSHA, Base: p.BaseSHA})
		delivery := traffic.NewDelivery()
		s := sentPR{pr: pr, tier: tiers[inst%3], review: tiers[inst%3] != jobs.TierFree && reviewable(p, cfg.Filters.Exclude)}
		// GitHub does not redeliver by itself; an operator (or this loop)
		// redelivers what was refused. Only 2xx counts as accepted.
		for attempt := 0; attempt < 100; attempt++ {
			code, err := sender.Send(ctx, "pull_request", delivery, body)
			if err == nil && code >= 200 && code < 300 {
				s.ok = true
				break
			}
			if code == 503 {
				rep.Unavailable503++
			}
			time.Sleep(200 * time.Millisecond)
		}
		sent = append(sent, s)
		time.Sleep(interval)
	}
	if gl != nil {
		gl.followUps(ctx, "http://"+a.ListenAddr()+"/webhook/gitlab", -1, prs, cfg.Filters.Exclude, &rep)
	}
	<-chaosDone
	// wait for every accepted PR to be published
	deadline := start.Add(c.timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		done := 0
		for _, s := range sent {
			if fakes.Summaries(s.pr) > 0 {
				done++
			}
		}
		if done == len(sent) && (gl == nil || gl.done()) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	// and for the jobs still queued or waiting to retry (a finalize that
	// found another publishing, say) to end: lost means not done by the
	// deadline, not "not done the moment the last summary appeared"
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if lost, _ := chaosJobs(ctx, a); lost == 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	rep.Drained = time.Now()
	time.Sleep(2 * time.Second) // a late duplicate would show now
	rep.Elapsed = time.Since(start)
	if scenario == "soak" {
		rep.AfterDrain, rep.BoundPerPR = usedMemory(ctx, a), c.soakKB*1024
	}
	rep.PRs = len(sent) // the soak's retained PRs
	if scenario == "soak" {
		missing, _, err := harness.KeysWithoutTTL(ctx, a.Redis())
		rep.checkSoak(missing, err)
	}
	rep.ProviderLimited = 0
	for _, st := range fakes.OpenAI.Stats() {
		rep.ProviderLimited += st.RateLimited
		rep.Hung += st.Faults
		rep.LastHang = latest(rep.LastHang, st.LastFault)
	}
	for _, s := range sent {
		if s.ok {
			rep.Accepted++
		}
		n := fakes.Summaries(s.pr)
		st := fakes.GitHub.Stats(s.pr.Owner, s.pr.Repo, s.pr.Number)
		if n > 0 {
			rep.Published++
		}
		if n > 1 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s has %d summary comments", s.pr, n))
		}
		rep.Duplicates += st.Duplicates + max(n-1, 0) + max(st.Reviews-1, 0)
		if s.review {
			rep.WantReviews++
			rep.Reviews += min(st.Reviews, 1)
		}
		if s.ok && n == 0 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: accepted but never published", s.pr))
		}
		if s.review && n > 0 && st.Reviews != 1 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: %d reviews, want 1", s.pr, st.Reviews))
		}
	}
	if gl != nil {
		g := gl.check(&rep)
		rep.GitLab = &g
	}
	// every job completed or archived with a reason; none lost
	lost, archived := chaosJobs(ctx, a)
	rep.Lost, rep.Archived = lost, archived
	if lost > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d jobs neither completed nor archived: %s", lost, strings.Join(stuckTasks(a, 8), "; ")))
	}
	if rep.Duplicates > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d duplicated effects on GitHub or GitLab", rep.Duplicates))
	}
	if scenario == "cluster" { // the limiter holds on a cluster too
		for _, m := range cfg.Models {
			lim, _ := m.Limits()
			var adm []ratelimit.Admission
			for _, x := range fakes.OpenAI.Admissions(m.Name) {
				adm = append(adm, ratelimit.Admission{At: x.At, Cost: x.Cost})
			}
			chk := ratelimit.CheckIntervals(adm, lim.TokensPerPeriod, lim.Period, lim.BurstTokens)
			rep.Checked = append(rep.Checked, fmt.Sprintf("%s: %d calls, worst interval %.3f of allowance", m.Name, chk.Admissions, chk.WorstRatio))
			if chk.Violations > 0 {
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: the limiter was exceeded in %d intervals on the cluster", m.Name, chk.Violations))
			}
		}
	}
	stopServe()
	<-served
	return rep, nil
}

// latest is the later of a and b.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func reviewable(p corpus.PR, exclude []string) bool {
	for _, f := range p.Files {
		if f.Patch == nil || f.Status == "removed" {
			continue
		}
		if _, ex := workers.Excluded(f.Filename, exclude); !ex {
			return true
		}
	}
	return false
}

// chaosJobs counts tasks that are neither completed nor archived (lost or
// stuck) and the archived ones.
func chaosJobs(ctx context.Context, a *server.Server) (lost, archived int) {
	for _, q := range jobs.Queues {
		info, err := a.Inspector().GetQueueInfo(q)
		if err != nil {
			continue
		}
		lost += info.Pending + info.Active + info.Scheduled + info.Retry
		archived += info.Archived
	}
	return lost, archived
}

// inject runs the scenario's fault while the workload arrives.
func (r *chaosRun) inject(ctx context.Context, scenario string, srv *redisproc.Server, a *server.Server, sender *traffic.Sender, rep *chaosReport) {
	time.Sleep(r.c.arrivalFor / 4)
	switch scenario {
	case "crash":
		rng := rand.New(rand.NewSource(r.c.seed))
		var wg sync.WaitGroup
		for k := 0; k < r.c.kills && ctx.Err() == nil; k++ {
			i := rng.Intn(len(r.procs))
			r.mu.Lock()
			victim := r.procs[i]
			r.mu.Unlock()
			var running [][2]string
			for _, t := range activeTasksOf(a, victim.Pid()) {
				// the heartbeat may be a few seconds old: keep what is still running
				if info, err := a.Inspector().GetTaskInfo(t[0], t[1]); err == nil && info.State == asynq.TaskStateActive {
					running = append(running, t)
				}
			}
			killed := time.Now()
			victim.Kill()
			rep.Kills++
			r.mu.Lock()
			rep.LastKill = killed
			r.mu.Unlock()
			r.spawn(i)
			for _, t := range running {
				wg.Add(1)
				go func(q, id string) {
					defer wg.Done()
					if d, ok := waitRerun(a, q, id, killed, 3*time.Minute); ok {
						r.mu.Lock()
						rep.Recovery = append(rep.Recovery, d)
						r.mu.Unlock()
					}
				}(t[0], t[1])
			}
			time.Sleep(r.c.killEvery)
		}
		wg.Wait()
	case "soak":
		start := time.Now()
		for time.Since(start) < r.c.soak+30*time.Second && ctx.Err() == nil {
			smp := soakSample{At: time.Since(start), Goroutines: runtime.NumGoroutine(), RedisMem: usedMemory(ctx, a)}
			r.mu.Lock()
			for _, p := range r.procs {
				if p != nil {
					smp.WorkerRSS = max(smp.WorkerRSS, harness.ProcStatusBytes(strconv.Itoa(p.Pid()), "VmRSS"))
				}
			}
			r.mu.Unlock()
			rep.Samples = append(rep.Samples, smp)
			time.Sleep(10 * time.Second)
		}
	case "stall":
		r.mu.Lock()
		victim := r.procs[0]
		r.mu.Unlock()
		victim.Signal(syscall.SIGSTOP)
		time.Sleep(r.c.stallFor)
		victim.Signal(syscall.SIGCONT)
	case "redis-restart", "redis-kill":
		base := "http://" + a.ListenAddr()
		down := func() {
			for i := 0; i < 10; i++ {
				if resp, err := http.Get(base + "/readyz"); err == nil {
					resp.Body.Close()
					if resp.StatusCode == 503 {
						rep.ReadyzDown = true
						return
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		if scenario == "redis-restart" {
			srv.StopGraceful()
		} else {
			srv.Kill()
		}
		down()
		time.Sleep(2 * time.Second)
		if err := srv.StartAgain(); err != nil {
			rep.Problems = append(rep.Problems, "redis did not come back: "+err.Error())
		}
	}
}

// activeTasksOf lists (queue, id) of the tasks a worker process runs.
func activeTasksOf(a *server.Server, pid int) [][2]string {
	servers, err := a.Inspector().Servers()
	if err != nil {
		return nil
	}
	var out [][2]string
	for _, s := range servers {
		if s.PID != pid {
			continue
		}
		for _, w := range s.ActiveWorkers {
			out = append(out, [2]string{w.Queue, w.TaskID})
		}
	}
	return out
}

// waitRerun waits until a task killed mid-run is running again (on
// another worker) or done, and returns how long that took.
func waitRerun(a *server.Server, queue, id string, killed time.Time, limit time.Duration) (time.Duration, bool) {
	for time.Since(killed) < limit {
		info, err := a.Inspector().GetTaskInfo(queue, id)
		if err != nil {
			return time.Since(killed), true // done and gone (or revoked)
		}
		switch info.State {
		case asynq.TaskStateCompleted, asynq.TaskStateArchived:
			return time.Since(killed), true
		case asynq.TaskStateActive:
			if !info.LastFailedAt.IsZero() && info.LastFailedAt.After(killed) {
				return time.Since(killed), true
			}
			if servers, err := a.Inspector().Servers(); err == nil && runningElsewhere(servers, id, killed) {
				return time.Since(killed), true
			}
			// prq's own record says so at once (asynq's worker list lags
			// by its heartbeat): a process that beat since the kill
			if ok, err := a.Scheduler().RunningNow(context.Background(), id, time.Since(killed)); err == nil && ok {
				return time.Since(killed), true
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, false
}

func runningElsewhere(servers []*asynq.ServerInfo, id string, killed time.Time) bool {
	for _, s := range servers {
		for _, w := range s.ActiveWorkers {
			if w.TaskID == id && w.Started.After(killed) {
				return true
			}
		}
	}
	return false
}

// stuckTasks describes up to n tasks that are not completed or archived.
func stuckTasks(a *server.Server, n int) []string {
	var out []string
	for _, q := range jobs.Queues {
		for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){a.Inspector().ListPendingTasks, a.Inspector().ListActiveTasks, a.Inspector().ListScheduledTasks, a.Inspector().ListRetryTasks} {
			tasks, _ := list(q)
			for _, t := range tasks {
				if len(out) < n {
					out = append(out, fmt.Sprintf("%s %s %s next %s retried %d err %q", q, t.State, t.ID, t.NextProcessAt.Format(time.RFC3339), t.Retried, t.LastErr))
				}
			}
		}
	}
	return out
}
