package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/prq-dev/prq/internal/quantile"
)

// ceilingReport is a whole ceiling run.
type ceilingReport struct {
	Upstream    string          `json:"upstream"`
	RunS        float64         `json:"run_s"`
	Cores       int             `json:"cores"`
	Concurrency int             `json:"concurrency"`
	Models      []string        `json:"models"` // summary, review, chat
	Rate        float64         `json:"rate_prs_per_s,omitempty"`
	Idle        *idleFigures    `json:"idle,omitempty"`
	Runs        []ceilingResult `json:"runs"`
}

// ceilingResult is one run: a Redis set-up, a limiter, a process count.
type ceilingResult struct {
	Mode          string   `json:"mode"` // redis or cluster
	Limiter       string   `json:"limiter"`
	Processes     int      `json:"processes"`
	Nodes         []string `json:"nodes"`
	PRsSent       int      `json:"prs_sent"`
	ChatsSent     int      `json:"chats_sent"`
	WebhookErrors int      `json:"webhook_errors"`
	Provider429s  int64    `json:"provider_429s"`
	ceilingFigures
	Idle *idleFigures `json:"-"` // measured in this run, reported once
}

func (r ceilingResult) maxRedisCores() float64 {
	m := 0.0
	for _, c := range r.RedisCores {
		m = max(m, c)
	}
	return m
}

// idleFigures are the idle workers' cost: Redis's commands per second
// per worker process (INFO, so script internals included, serve's own
// idle rate subtracted), and what each sent (its client's count).
type idleFigures struct {
	WindowS                float64            `json:"window_s"`
	Processes              int                `json:"processes"`
	ServeCmdsPerS          float64            `json:"serve_commands_per_s"`
	RedisCmdsPerSPerWorker float64            `json:"redis_commands_per_s_per_worker"`
	SentPerS               float64            `json:"sent_commands_per_s_per_worker"`
	SentByCommand          map[string]float64 `json:"sent_by_command_per_s"`
	SentByScript           map[string]float64 `json:"sent_by_script_per_s"`
}

func (f *idleFigures) addWorker(commands, scripts map[string]int64) {
	if f.SentByCommand == nil {
		f.SentByCommand, f.SentByScript = map[string]float64{}, map[string]float64{}
	}
	per := 1 / (f.WindowS * float64(f.Processes))
	for k, v := range commands {
		f.SentByCommand[k] += float64(v) * per
		f.SentPerS += float64(v) * per
	}
	for k, v := range scripts {
		f.SentByScript[k] += float64(v) * per
	}
}

// ceilingWindow is what was measured over one run's window.
type ceilingWindow struct {
	From, To             time.Time
	Cores                int
	Nodes                []string
	RedisStart, RedisEnd []redisSample // per node
	// CPU used in the window: the worker processes, this process (serve,
	// the fakes, the driver), the fakes' handlers, the workers' no-op
	// provider; the machine's busy and total time over every core.
	Workers, Self, GitHub, Provider, Upstream time.Duration
	Machine                                   machineCPU
	Calls, CallErrors, Calls429               int64
	CallsByModel                              map[string]int64
	Waits                                     []time.Duration // admissions in the window
	Scripts                                   map[string]int64
	Backlog                                   []int64 // sampled
	PRsSent                                   int64   // pull requests sent in the window
	// Open: PRs arrived at a set rate (--rate), not as the backlog asked.
	Open bool
}

func (w *ceilingWindow) setCPU(a, b ceilingSample) {
	w.RedisStart, w.RedisEnd = a.redis, b.redis
	w.Workers, w.Self = b.workers-a.workers, b.self-a.self
	w.GitHub, w.Provider = b.github-a.github, b.provider-a.provider
	w.Machine = machineCPU{busy: b.machine.busy - a.machine.busy, total: b.machine.total - a.machine.total}
}

func (w *ceilingWindow) in(ms int64) bool { return ms >= w.From.UnixMilli() && ms < w.To.UnixMilli() }

// addCalls counts the LLM calls started in the window.
func (w *ceilingWindow) addCalls(calls []callRecord) {
	if w.CallsByModel == nil {
		w.CallsByModel = map[string]int64{}
	}
	for _, c := range calls {
		if !w.in(c.At) {
			continue
		}
		switch c.Outcome {
		case "ok":
			w.Calls++
			w.CallsByModel[c.Model]++
		case "429":
			w.Calls429++
		default:
			w.CallErrors++
		}
	}
}

// addWaits counts the admissions made in the window.
func (w *ceilingWindow) addWaits(ws []admitWait) {
	for _, a := range ws {
		if w.in(a.At) {
			w.Waits = append(w.Waits, time.Duration(a.WaitUS)*time.Microsecond)
		}
	}
}

// ceilingFigures are a window's figures.
type ceilingFigures struct {
	WindowS      float64          `json:"window_s"`
	Calls        int64            `json:"llm_calls"`
	CallErrors   int64            `json:"llm_call_errors"`
	Calls429     int64            `json:"llm_calls_429"`
	CallsByModel map[string]int64 `json:"llm_calls_by_model"`
	Admitted     int64            `json:"admitted"`
	CallsPerS    float64          `json:"llm_calls_per_s"`
	AdmittedPerS float64          `json:"admitted_per_s"`
	// RedisCores is each node's CPU (used_cpu_sys + used_cpu_user) over
	// the window's wall time.
	RedisCores        []float64 `json:"redis_cores"`
	RedisCPUMsPerCall float64   `json:"redis_cpu_ms_per_call"`
	// Commands (INFO commandstats, script internals included, every node)
	// per LLM call and per admitted job.
	CmdsPerCall     float64 `json:"commands_per_call"`
	CmdsPerAdmitted float64 `json:"commands_per_admitted_job"`
	// ByCommand: commandstats per LLM call, largest first; ByScript: the
	// script calls clients sent, per LLM call, by script.
	ByCommand      []commandShare `json:"commands_per_call_by_command"`
	ByScript       []commandShare `json:"script_calls_per_call_by_script"`
	AdmissionP50Ms float64        `json:"admission_p50_ms"`
	AdmissionP99Ms float64        `json:"admission_p99_ms"`
	BacklogMin     int64          `json:"held_backlog_min"`
	BacklogMean    float64        `json:"held_backlog_mean"`
	BacklogMax     int64          `json:"held_backlog_max"`
	// PRsPerS is the pull requests sent a second; MemoryPerPR what Redis's
	// used_memory grew by over the window, every node, per PR sent (in a
	// steady run: what a PR leaves in Redis, its retained run state with
	// its patches and results, plus its share of any backlog growth).
	PRsPerS     float64 `json:"prs_per_s"`
	MemoryPerPR float64 `json:"redis_memory_per_pr_bytes"`
	UsedMemory  []int64 `json:"redis_used_memory_end_bytes"`
	// CPU over the window's wall time, in cores.
	WorkersCores  float64 `json:"workers_cores"`
	UpstreamCores float64 `json:"noop_upstream_cores"` // part of the workers'
	SelfCores     float64 `json:"bench_process_cores"`
	ProviderCores float64 `json:"fake_provider_cores"` // part of the bench process's
	GitHubCores   float64 `json:"fake_github_cores"`   // part of the bench process's
	MachineBusy   float64 `json:"machine_busy"`        // of all cores
	Saturated     string  `json:"saturated"`           // redis, workers, fake, cores or none
	Verdict       string  `json:"verdict"`
}

// figures computes the window's figures.
func (w ceilingWindow) figures() ceilingFigures {
	f := ceilingFigures{WindowS: w.To.Sub(w.From).Seconds(), Calls: w.Calls, CallErrors: w.CallErrors, Calls429: w.Calls429, CallsByModel: w.CallsByModel,
		Admitted: int64(len(w.Waits))}
	if f.WindowS <= 0 {
		return f
	}
	f.CallsPerS, f.AdmittedPerS = float64(f.Calls)/f.WindowS, float64(f.Admitted)/f.WindowS
	var cpuMs float64
	var cmds, mem int64
	by := map[string]int64{}
	for i := range w.RedisStart {
		if i >= len(w.RedisEnd) {
			break
		}
		a, b := w.RedisStart[i], w.RedisEnd[i]
		cpu := b.cpuMs - a.cpuMs
		cpuMs += cpu
		mem += b.usedMemory - a.usedMemory
		f.UsedMemory = append(f.UsedMemory, b.usedMemory)
		f.RedisCores = append(f.RedisCores, cpu/1000/b.at.Sub(a.at).Seconds())
		for name, n := range b.by {
			if d := n - a.by[name]; d > 0 {
				by[name] += d
				cmds += d
			}
		}
	}
	if f.Calls > 0 {
		f.RedisCPUMsPerCall = cpuMs / float64(f.Calls)
		f.CmdsPerCall = float64(cmds) / float64(f.Calls)
		f.ByCommand = shares(by, f.Calls)
		f.ByScript = shares(w.Scripts, f.Calls)
	}
	f.PRsPerS = float64(w.PRsSent) / f.WindowS
	if w.PRsSent > 0 {
		f.MemoryPerPR = float64(mem) / float64(w.PRsSent)
	}
	if f.Admitted > 0 {
		f.CmdsPerAdmitted = float64(cmds) / float64(f.Admitted)
		ms := make([]float64, len(w.Waits))
		for i, d := range w.Waits {
			ms[i] = float64(d.Microseconds()) / 1000
		}
		f.AdmissionP50Ms, f.AdmissionP99Ms = quantile.Of(ms, .5), quantile.Of(ms, .99)
	}
	if len(w.Backlog) > 0 {
		f.BacklogMin, f.BacklogMax = w.Backlog[0], w.Backlog[0]
		var sum int64
		for _, b := range w.Backlog {
			f.BacklogMin, f.BacklogMax = min(f.BacklogMin, b), max(f.BacklogMax, b)
			sum += b
		}
		f.BacklogMean = float64(sum) / float64(len(w.Backlog))
	}
	cores := func(d time.Duration) float64 { return d.Seconds() / f.WindowS }
	f.WorkersCores, f.UpstreamCores, f.SelfCores = cores(w.Workers), cores(w.Upstream), cores(w.Self)
	f.ProviderCores, f.GitHubCores = cores(w.Provider), cores(w.GitHub)
	if w.Machine.total > 0 {
		f.MachineBusy = w.Machine.busy.Seconds() / w.Machine.total.Seconds()
	}
	f.Saturated, f.Verdict = verdictOf(verdictInput{Nodes: w.Nodes, RedisCores: f.RedisCores, Workers: f.WorkersCores, Self: f.SelfCores,
		Provider: f.ProviderCores, GitHub: f.GitHubCores, Cores: w.Cores, MachineBusy: f.MachineBusy, Backlog: w.Backlog, Open: w.Open})
	return f
}

// shares are counts per call, largest first (ties by name).
func shares(counts map[string]int64, calls int64) []commandShare {
	var out []commandShare
	for name, n := range counts {
		if n > 0 {
			out = append(out, commandShare{Command: name, PerJob: float64(n) / float64(calls)})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].PerJob != out[j].PerJob {
			return out[i].PerJob > out[j].PerJob
		}
		return out[i].Command < out[j].Command
	})
	return out
}

// saturation is what "saturated" means: 90% of what a resource has.
const saturation = 0.9

// verdictInput is what the verdict is drawn from: CPU in cores over the
// window, the machine's busy share of all its cores, and the backlog.
type verdictInput struct {
	Nodes                           []string
	RedisCores                      []float64
	Workers, Self, Provider, GitHub float64
	Cores                           int
	MachineBusy                     float64
	Backlog                         []int64 // sampled over the window
	Open                            bool    // arrivals at a set rate
}

// verdictOf names the resource that saturated first, from measurements:
// a Redis node near one core (Redis runs commands on one thread); the
// worker processes near every core; the bench process (the fakes, serve
// and the driver) near every core; or the machine's cores, all busy
// between them and whatever else runs on it. Otherwise nothing reached
// 90%: the rate is bound by waits and round trips, not by CPU.
func verdictOf(v verdictInput) (kind, text string) {
	busiest, at := 0.0, ""
	for i, c := range v.RedisCores {
		if c > busiest {
			busiest = c
			if i < len(v.Nodes) {
				at = v.Nodes[i]
			}
		}
	}
	var redisSum float64
	for _, c := range v.RedisCores {
		redisSum += c
	}
	cores := float64(max(v.Cores, 1))
	split := func() string {
		other := max(v.MachineBusy*cores-v.Workers-v.Self-redisSum, 0)
		return fmt.Sprintf("workers %.2f, Redis %.2f, bench process %.2f (fake provider %.2f, fake GitHub %.2f), other processes %.2f",
			v.Workers, redisSum, v.Self, v.Provider, v.GitHub, other)
	}
	switch {
	case busiest >= saturation:
		kind, text = "redis", fmt.Sprintf("Redis saturated first: %s at %.2f core (of one: Redis runs commands on one thread)", at, busiest)
	case v.Workers >= saturation*cores:
		kind, text = "workers", fmt.Sprintf("the workers' CPU saturated first: %.2f of %d cores", v.Workers, v.Cores)
	case v.Self >= saturation*cores:
		kind, text = "fake", fmt.Sprintf("the fakes saturated first: the bench process at %.2f of %d cores (fake provider %.2f, fake GitHub %.2f)", v.Self, v.Cores, v.Provider, v.GitHub)
	case v.MachineBusy >= saturation:
		name, most := "the workers", v.Workers
		if redisSum > most {
			name, most = "Redis", redisSum
		}
		if v.Self > most {
			name = "the bench process (fakes, serve, driver)"
		}
		kind, text = "cores", fmt.Sprintf("the machine's CPU saturated first: %.0f%% of %d cores busy, %s using most (cores: %s)", 100*v.MachineBusy, v.Cores, name, split())
	default:
		kind, text = "none", fmt.Sprintf("nothing reached 90%%: Redis %.2f core at most, machine %.0f%% busy (cores: %s); the rate is bound by waits and round trips", busiest, 100*v.MachineBusy, split())
	}
	return kind, text + backlogNote(v.Backlog, v.Open)
}

// backlogNote says what the held backlog shows. Kept full, it must never
// run empty, or the figure is not a saturated one. At a set rate it
// shows whether prq kept up: a backlog that grew by 200 tickets or more
// and ended above twice where it began fell behind.
func backlogNote(b []int64, open bool) string {
	if len(b) == 0 {
		return ""
	}
	least, most := b[0], b[0]
	for _, x := range b {
		least, most = min(least, x), max(most, x)
	}
	first, last := b[0], b[len(b)-1]
	switch {
	case open && last-first >= 200 && last > 2*first:
		return fmt.Sprintf("; prq fell behind the arrivals: the held backlog grew from %d to %d", first, last)
	case open:
		return fmt.Sprintf("; prq kept up with the arrivals: the held backlog stayed at most %d", most)
	case least == 0:
		return "; the held backlog ran empty at times, so this is not a saturated figure"
	}
	return ""
}

// writeCeiling prints the report and writes ceiling.md and ceiling.json.
func writeCeiling(out io.Writer, dir string, rep ceilingReport) error {
	md := ceilingMarkdown(rep)
	fmt.Fprint(out, "\n"+md)
	if err := os.WriteFile(filepath.Join(dir, "ceiling.md"), []byte(md), 0o644); err != nil {
		return err
	}
	js, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "ceiling.json"), js, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nwrote %s and %s\n", filepath.Join(dir, "ceiling.md"), filepath.Join(dir, "ceiling.json"))
	return nil
}

func ceilingMarkdown(rep ceilingReport) string {
	var md strings.Builder
	load := "the held backlog kept at half a second of admissions (at least 200 tickets)"
	if rep.Rate > 0 {
		load = fmt.Sprintf("%.1f pull requests a second arriving", rep.Rate)
	}
	fmt.Fprintf(&md, "Ceiling: upstream %s, models %s (summary, review, chat), %gs measured per run after a warm-up, %s; worker processes x %d; %d cores.\n\n",
		rep.Upstream, strings.Join(rep.Models, ", "), rep.RunS, load, rep.Concurrency, rep.Cores)
	md.WriteString("| Redis | limiter | processes | LLM calls/s | admitted/s | Redis CPU (core, per master) | Redis CPU per call (ms) | commands per call | commands per admitted job | admission p50 / p99 (ms) | held backlog min / mean / max | PRs/s | Redis memory per PR (KB) | workers CPU (cores) | bench process CPU (cores) | machine busy | saturated first |\n")
	md.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Runs {
		var rc []string
		for _, c := range r.RedisCores {
			rc = append(rc, fmt.Sprintf("%.2f", c))
		}
		fmt.Fprintf(&md, "| %s | %s | %d | %.0f | %.0f | %s | %.3f | %.0f | %.0f | %.1f / %.1f | %d / %.0f / %d | %.1f | %.1f | %.2f | %.2f | %.0f%% | %s |\n",
			r.Mode, r.Limiter, r.Processes, r.CallsPerS, r.AdmittedPerS, strings.Join(rc, " / "), r.RedisCPUMsPerCall, r.CmdsPerCall, r.CmdsPerAdmitted,
			r.AdmissionP50Ms, r.AdmissionP99Ms, r.BacklogMin, r.BacklogMean, r.BacklogMax, r.PRsPerS, r.MemoryPerPR/1024, r.WorkersCores, r.SelfCores, 100*r.MachineBusy, r.Saturated)
	}
	for _, line := range clusterRatios(rep.Runs) {
		md.WriteString("\n" + line)
	}
	md.WriteString("\n")
	for _, r := range rep.Runs {
		fmt.Fprintf(&md, "\n%s %s x%d: %s.", r.Mode, r.Limiter, r.Processes, r.Verdict)
		if r.CallErrors > 0 || r.Calls429 > 0 || r.WebhookErrors > 0 || r.Provider429s > 0 {
			fmt.Fprintf(&md, " **Errors: %d failed LLM calls, %d 429s (provider counted %d), %d webhooks refused.**", r.CallErrors, r.Calls429, r.Provider429s, r.WebhookErrors)
		}
		if len(r.CallsByModel) > 1 {
			var parts []string
			for _, m := range rep.Models {
				parts = append(parts, fmt.Sprintf("%s %d", m, r.CallsByModel[m]))
			}
			fmt.Fprintf(&md, " Calls by model: %s.", strings.Join(parts, ", "))
		}
		md.WriteString("\n")
	}
	for _, r := range busiestRuns(rep.Runs) {
		fmt.Fprintf(&md, "\nPer LLM call, %s %s x%d (%.0f calls/s):\n\n", r.Mode, r.Limiter, r.Processes, r.CallsPerS)
		md.WriteString("| command (INFO commandstats, inside scripts too) | per call | | script (EVALSHA sent) | calls per call |\n|---|---|---|---|---|\n")
		n := max(len(r.ByCommand), len(r.ByScript))
		for i := 0; i < n && i < 30; i++ {
			c, s := "", ""
			if i < len(r.ByCommand) {
				c = fmt.Sprintf("%s | %.2f", strings.ToLower(r.ByCommand[i].Command), r.ByCommand[i].PerJob)
			} else {
				c = " | "
			}
			if i < len(r.ByScript) {
				s = fmt.Sprintf("%s | %.2f", r.ByScript[i].Command, r.ByScript[i].PerJob)
			} else {
				s = " | "
			}
			fmt.Fprintf(&md, "| %s | | %s |\n", c, s)
		}
	}
	if f := rep.Idle; f != nil {
		fmt.Fprintf(&md, "\nIdle: %d worker process(es) with nothing to do for %.0fs: **%.1f Redis commands/s per worker process** (INFO, script internals included; serve's own %.1f/s subtracted); each sent %.1f commands/s:",
			f.Processes, f.WindowS, f.RedisCmdsPerSPerWorker, f.ServeCmdsPerS, f.SentPerS)
		for _, s := range shares(scaled(f.SentByCommand), 1000) {
			fmt.Fprintf(&md, " %s %.2f,", strings.ToLower(s.Command), s.PerJob)
		}
		md.WriteString(" scripts:")
		for _, s := range shares(scaled(f.SentByScript), 1000) {
			fmt.Fprintf(&md, " %s %.2f,", s.Command, s.PerJob)
		}
		md.WriteString("\n")
	}
	return md.String()
}

// scaled turns rates into counts in thousandths (for shares).
func scaled(m map[string]float64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range m {
		out[k] = int64(v*1000 + 0.5)
	}
	return out
}

// busiestRuns is the run with the most calls/s of each Redis set-up and
// limiter: the breakdowns shown.
func busiestRuns(rs []ceilingResult) []ceilingResult {
	best := map[string]int{}
	var order []string
	for i, r := range rs {
		k := r.Mode + " " + r.Limiter
		j, ok := best[k]
		if !ok {
			order = append(order, k)
		}
		if !ok || r.CallsPerS > rs[j].CallsPerS {
			best[k] = i
		}
	}
	var out []ceilingResult
	for _, k := range order {
		out = append(out, rs[best[k]])
	}
	return out
}

// clusterRatios compares each cluster run with the one-Redis run of the
// same limiter and process count.
func clusterRatios(rs []ceilingResult) []string {
	var out []string
	for _, c := range rs {
		if c.Mode != "cluster" {
			continue
		}
		for _, r := range rs {
			if r.Mode == "redis" && r.Limiter == c.Limiter && r.Processes == c.Processes && r.CallsPerS > 0 {
				out = append(out, fmt.Sprintf("Cluster / one Redis, %s x%d: %.2fx the calls/s.\n", c.Limiter, c.Processes, c.CallsPerS/r.CallsPerS))
			}
		}
	}
	return out
}
