package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"gopkg.in/yaml.v3"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

type chaosFlags struct {
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
}

func (c *chaosFlags) register(fs *flag.FlagSet) {
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
	fs.Float64Var(&c.latency, "latency-scale", 0.5, "provider latency scale (1: summaries ~0.8 s, reviews ~8 s), so kills catch jobs in flight")
}

// chaosReport is what one scenario found.
type chaosReport struct {
	Scenario        string
	PRs, Published  int
	Reviews         int
	WantReviews     int
	Duplicates      int
	Lost            int
	Archived        int
	Accepted        int
	Kills           int
	Recovery        []time.Duration
	Unavailable503  int
	ReadyzDown      bool
	Elapsed         time.Duration
	Problems        []string
	ProviderLimited int64
	Checked         []string
	// soak: samples during the arrivals, and Redis memory before and after
	Samples              []soakSample
	Baseline, AfterDrain int64
}

type soakSample struct {
	At         time.Duration
	WorkerRSS  int64 // largest worker's resident set, bytes
	Goroutines int   // the serve process's
	RedisMem   int64
}

func usedMemory(ctx context.Context, a *app) int64 {
	return redisInfoInt(ctx, a.rdb, "memory", "used_memory")
}

func runChaos(ctx context.Context, env *cmdEnv, args []string) error {
	var c chaosFlags
	_, help, err := setup(env, "chaos", "Proves prq survives: kills, stalls and Redis restarts under load, with real processes, a real Redis and the fake provider and GitHub. Prints what it found; exits non-zero on any lost or duplicated work.", modeCheck, args, c.register)
	if help || err != nil {
		return err
	}
	if c.prs <= 0 || c.processes <= 0 || c.compress <= 0 {
		return &usageError{"--prs, --processes and --compress must be positive"}
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	failed := false
	for _, sc := range splitComma(c.scenarios) {
		rep, err := chaosScenario(ctx, env, c, sc)
		if err != nil {
			return fmt.Errorf("chaos %s: %w", sc, err)
		}
		printChaos(env.stdout, rep)
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
	if r.Kills > 0 {
		ds := append([]time.Duration(nil), r.Recovery...)
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		p50, mx := time.Duration(0), time.Duration(0)
		if len(ds) > 0 {
			p50, mx = ds[len(ds)/2], ds[len(ds)-1]
		}
		fmt.Fprintf(w, "  %d kill -9; %d jobs were running in killed workers; recovery (kill to the job running again or done): p50 %s, max %s\n",
			r.Kills, len(r.Recovery), p50.Round(100*time.Millisecond), mx.Round(100*time.Millisecond))
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
		fmt.Fprintf(w, "  soak: Redis memory %.1f MB before, %.1f MB at the end of arrivals, %.1f MB after the drain (%.1f KB per PR kept: runs live %s, finished plan and chat tasks 72 h)\n",
			float64(r.Baseline)/(1<<20), float64(last.RedisMem)/(1<<20), float64(r.AfterDrain)/(1<<20),
			float64(r.AfterDrain-r.Baseline)/1024/float64(max(r.PRs, 1)), "14 days")
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

// chaosRedis is a redis-server the scenario controls (restart, kill -9).
type chaosRedis struct {
	srv *redistest.Server
}

// chaosRun is the system under test: serve in this process, workers as
// processes that can be killed, stopped and restarted.
type chaosRun struct {
	c       chaosFlags
	cfg     Config
	fakes   *fakeSet
	app     *app
	cfgFile string
	env     []string
	mu      sync.Mutex
	procs   []*exec.Cmd
	n       int
}

func (r *chaosRun) spawn(i int) error {
	exe := r.c.exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return err
		}
	}
	r.n++
	logf, err := os.Create(filepath.Join(r.c.out, fmt.Sprintf("worker%d-%d.log", i, r.n)))
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, "worker", "--config", r.cfgFile)
	cmd.Env = r.env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { cmd.Wait(); logf.Close() }()
	r.mu.Lock()
	r.procs[i] = cmd
	r.mu.Unlock()
	return nil
}

func chaosScenario(ctx context.Context, env *cmdEnv, c chaosFlags, scenario string) (chaosReport, error) {
	rep := chaosReport{Scenario: scenario}
	switch scenario {
	case "crash", "stall", "redis-restart", "redis-kill", "cluster", "soak":
	default:
		return rep, &usageError{fmt.Sprintf("unknown scenario %q (want crash, stall, redis-restart, redis-kill, cluster or soak)", scenario)}
	}
	fsync := "everysec"
	if scenario == "redis-kill" {
		fsync = c.fsync
	}
	var srv *redistest.Server
	var redisURL string
	if scenario == "cluster" {
		cl, err := startCluster(ctx)
		if err != nil {
			return rep, err
		}
		defer cl.stop()
		redisURL = cl.url()
	} else {
		var err error
		srv, err = redistest.Start("--appendonly", "yes", "--appendfsync", fsync)
		if err != nil {
			return rep, err
		}
		defer srv.Stop()
		redisURL = srv.URL()
	}
	b := benchFlags{compress: c.compress, concurrency: 20, seed: c.seed}
	cfg := benchConfig(b, redisURL)
	cfg.Tiers["free"] = Tier{Weight: 1, Review: boolPtr(false)}
	// roomy limits: the point is failure, not the bucket
	for i := range cfg.Models {
		cfg.Models[i].TokensPerMinute *= 4
	}
	apiKey := "sk-chaos-" + randomHex(8)
	fakes, err := startFakes(&cfg, c.compress, apiKey, c.seed, scenario == "cluster")
	if err != nil {
		return rep, err
	}
	defer fakes.close()
	fakes.openai.SetLatencyScale(c.latency)
	cfg.GitHub.AppID, cfg.GitHub.PrivateKey, cfg.GitHub.APIURL = fakes.appID, Secret(fakes.keyPEM), fakes.githubURL
	cfg.GitHub.WebhookSecret, cfg.GitHub.AppSlug = Secret(randomHex(16)), "prq-chaos"
	cfg.OpenAI.APIKey, cfg.OpenAI.BaseURL = Secret(apiKey), fakes.openaiURL
	cfg.Addr = "127.0.0.1:0"
	cfgFile := filepath.Join(c.out, "chaos-config.yaml")
	yb, _ := yaml.Marshal(map[string]any{"models": cfg.Models, "jobs": cfg.Jobs, "tiers": cfg.Tiers, "log": LogConfig{Format: "json", Level: "info"},
		"shutdown_timeout": cfg.ShutdownTimeout, "worker": cfg.Worker, "github": map[string]any{"write_gap": cfg.GitHub.WriteGap}})
	if err := os.WriteFile(cfgFile, yb, 0o600); err != nil {
		return rep, err
	}
	r := &chaosRun{c: c, cfg: cfg, fakes: fakes, cfgFile: cfgFile, procs: make([]*exec.Cmd, c.processes),
		env: append(os.Environ(), "REDIS_URL="+redisURL, "GITHUB_APP_ID=1", "GITHUB_PRIVATE_KEY="+string(fakes.keyPEM), "GITHUB_API_URL="+fakes.githubURL,
			"OPENAI_API_KEY="+apiKey, "OPENAI_BASE_URL="+fakes.openaiURL, "GITHUB_APP_SLUG=prq-chaos")}
	// serve, in this process
	sctx, stopServe := context.WithCancel(ctx)
	defer stopServe()
	opt, _ := parseRedisURL(redisURL)
	logf, _ := os.Create(filepath.Join(c.out, scenario+"-serve.log"))
	defer logf.Close()
	a, err := newApp(sctx, &cfg, newLogger(logf, LogConfig{Format: "json", Level: "info"}), opt)
	if err != nil {
		return rep, err
	}
	defer a.close()
	r.app = a
	served := make(chan error, 1)
	go func() {
		served <- a.run(sctx, &cmdEnv{getenv: env.getenv, stdout: io.Discard, stderr: io.Discard}, running{http: true}, nil)
	}()
	for a.listenAddr() == "" {
		time.Sleep(10 * time.Millisecond)
	}
	for i := 0; i < c.processes; i++ {
		if err := r.spawn(i); err != nil {
			return rep, err
		}
	}
	defer func() {
		for _, p := range r.procs {
			if p != nil && p.Process != nil {
				p.Process.Signal(syscall.SIGCONT)
				p.Process.Signal(syscall.SIGTERM)
			}
		}
		time.Sleep(2 * time.Second)
		for _, p := range r.procs {
			if p != nil && p.Process != nil {
				p.Process.Kill()
			}
		}
	}()
	// the workload: PRs across tiers and tenants
	prs, _, err := loadPRs(c.corpus, max(200, c.prs), c.seed)
	if err != nil {
		return rep, err
	}
	rng := rand.New(rand.NewSource(c.seed))
	tiers := []jobs.Tier{jobs.TierPaid, jobs.TierTrial, jobs.TierFree}
	for inst := int64(1); inst <= 9; inst++ {
		a.store.SetPlan(ctx, store.Plan{Installation: inst, Tier: tiers[inst%3], Explicit: true})
	}
	type sentPR struct {
		pr     jobs.PR
		tier   jobs.Tier
		review bool
		ok     bool
	}
	var sent []sentPR
	sender := &traffic.Sender{URL: "http://" + a.listenAddr() + "/webhook", Secret: []byte(cfg.GitHub.WebhookSecret)}
	start := time.Now()
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		r.inject(ctx, scenario, srv, a, sender, &rep)
	}()
	arrivals := c.arrivalFor
	if scenario == "soak" {
		arrivals = c.soak
		rep.Baseline = usedMemory(ctx, a)
	}
	interval := arrivals / time.Duration(c.prs)
	for i := 0; i < c.prs; i++ {
		p := prs[rng.Intn(len(prs))]
		for len(p.Files) == 0 || len(p.Files) > 30 {
			p = prs[rng.Intn(len(prs))]
		}
		inst := int64(1 + rng.Intn(9))
		p.Number, p.HeadSHA = 1000+i, randomHex(40)
		owner := fmt.Sprintf("tenant-%d", inst)
		fakes.github.AddPR(inst, owner, p.Name(), p)
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
	<-chaosDone
	// wait for every accepted PR to be published
	deadline := start.Add(c.timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		done := 0
		for _, s := range sent {
			if chaosSummaries(fakes, s.pr) > 0 {
				done++
			}
		}
		if done == len(sent) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // a late duplicate would show now
	rep.Elapsed = time.Since(start)
	if scenario == "soak" {
		rep.AfterDrain = usedMemory(ctx, a)
	}
	rep.PRs = len(sent)
	rep.ProviderLimited = 0
	for _, st := range fakes.openai.Stats() {
		rep.ProviderLimited += st.RateLimited
	}
	for _, s := range sent {
		if s.ok {
			rep.Accepted++
		}
		n := chaosSummaries(fakes, s.pr)
		st := fakes.github.Stats(s.pr.Owner, s.pr.Repo, s.pr.Number)
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
	// every job completed or archived with a reason; none lost
	lost, archived := chaosJobs(ctx, a)
	rep.Lost, rep.Archived = lost, archived
	if lost > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d jobs neither completed nor archived: %s", lost, strings.Join(stuckTasks(a, 8), "; ")))
	}
	if rep.Duplicates > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d duplicated effects on GitHub", rep.Duplicates))
	}
	if scenario == "cluster" { // the limiter holds on a cluster too
		for _, m := range cfg.Models {
			lim, _ := m.limits()
			var adm []ratelimit.Admission
			for _, x := range fakes.openai.Admissions(m.Name) {
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

func chaosSummaries(f *fakeSet, pr jobs.PR) int {
	n := 0
	for _, c := range f.github.Comments(pr.Owner, pr.Repo, pr.Number) {
		if strings.Contains(c.Body, workers.SummaryMarker) {
			n++
		}
	}
	return n
}

// chaosJobs counts tasks that are neither completed nor archived (lost or
// stuck) and the archived ones.
func chaosJobs(ctx context.Context, a *app) (lost, archived int) {
	for _, q := range jobs.Queues {
		info, err := a.insp.GetQueueInfo(q)
		if err != nil {
			continue
		}
		lost += info.Pending + info.Active + info.Scheduled + info.Retry
		archived += info.Archived
	}
	return lost, archived
}

// inject runs the scenario's fault while the workload arrives.
func (r *chaosRun) inject(ctx context.Context, scenario string, srv *redistest.Server, a *app, sender *traffic.Sender, rep *chaosReport) {
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
			for _, t := range activeTasksOf(a, victim.Process.Pid) {
				// the heartbeat may be a few seconds old: keep what is still running
				if info, err := a.insp.GetTaskInfo(t[0], t[1]); err == nil && info.State == asynq.TaskStateActive {
					running = append(running, t)
				}
			}
			killed := time.Now()
			victim.Process.Kill()
			rep.Kills++
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
				if p != nil && p.Process != nil {
					smp.WorkerRSS = max(smp.WorkerRSS, procStatusBytes(strconv.Itoa(p.Process.Pid), "VmRSS"))
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
		victim.Process.Signal(syscall.SIGSTOP)
		time.Sleep(r.c.stallFor)
		victim.Process.Signal(syscall.SIGCONT)
	case "redis-restart", "redis-kill":
		base := "http://" + a.listenAddr()
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
func activeTasksOf(a *app, pid int) [][2]string {
	servers, err := a.insp.Servers()
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
func waitRerun(a *app, queue, id string, killed time.Time, limit time.Duration) (time.Duration, bool) {
	for time.Since(killed) < limit {
		info, err := a.insp.GetTaskInfo(queue, id)
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
			if servers, err := a.insp.Servers(); err == nil && runningElsewhere(servers, id, killed) {
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
func stuckTasks(a *app, n int) []string {
	var out []string
	for _, q := range jobs.Queues {
		for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){a.insp.ListPendingTasks, a.insp.ListActiveTasks, a.insp.ListScheduledTasks, a.insp.ListRetryTasks} {
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
