package bench

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/fake/fakeopenai"
)

// redisCost is what Redis spends on a strategy, measured where it means
// something: per job while the models are saturated, and per second per
// worker process while nothing happens.
type redisCost struct {
	// MarginalCmdsPerJob: Redis commands (INFO commandstats, script
	// internals included) in the middle half of the arrivals, when the
	// review model is saturated, over the LLM calls started in it.
	MarginalCmdsPerJob float64 `json:"marginal_commands_per_job"`
	// CPUMsPerCall: Redis CPU (user + sys) in that window per LLM call.
	CPUMsPerCall float64 `json:"cpu_ms_per_llm_call"`
	// IdleCmdsPerSec: commands per second per worker process before any
	// work arrives (the serve process's own share subtracted).
	IdleCmdsPerSec float64 `json:"idle_commands_per_s_per_worker"`
	// WindowS is the saturated window's length (real seconds).
	WindowS float64 `json:"window_s"`
	// TopPerJob: the commands that make up most of the marginal figure,
	// per job, largest first (at most 12).
	TopPerJob []commandShare `json:"top_commands_per_job"`
}

type commandShare struct {
	Command string  `json:"command"`
	PerJob  float64 `json:"per_job"`
}

// redisSample is one reading of Redis's counters.
type redisSample struct {
	at    time.Time
	cmds  int64
	cpuMs float64
	by    map[string]int64 // calls per command
	// usedMemory is INFO's used_memory (bytes).
	usedMemory int64
}

func sampleRedis(ctx context.Context, rdb redis.UniversalClient) redisSample {
	at := time.Now()
	info, err := rdb.Info(ctx, "commandstats", "cpu", "memory").Result()
	if err != nil {
		return redisSample{at: at, by: map[string]int64{}}
	}
	return parseRedisInfo(info, at)
}

// parseRedisInfo reads the commandstats, CPU and memory sections of an
// INFO reply taken at at.
func parseRedisInfo(info string, at time.Time) redisSample {
	s := redisSample{at: at, by: map[string]int64{}}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if head, rest, ok := strings.Cut(line, "calls="); ok {
			v, _, _ := strings.Cut(rest, ",")
			n, _ := strconv.ParseInt(v, 10, 64)
			s.cmds += n
			name, _, _ := strings.Cut(strings.TrimPrefix(head, "cmdstat_"), ":")
			s.by[name] = n
			continue
		}
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			s.usedMemory, _ = strconv.ParseInt(v, 10, 64)
			continue
		}
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				sec, _ := strconv.ParseFloat(v, 64)
				s.cpuMs += sec * 1000
			}
		}
	}
	return s
}

// costMeter samples Redis at the edges of the saturated window (25% and
// 75% of the arrival span) as the run passes them.
type costMeter struct {
	rdb        redis.UniversalClient
	insp       *asynq.Inspector
	from, to   time.Duration
	start, end redisSample
	serve      float64 // idle commands/s of the serve process alone
}

func newCostMeter(rdb redis.UniversalClient, span time.Duration, insp *asynq.Inspector) *costMeter {
	return &costMeter{rdb: rdb, insp: insp, from: span / 4, to: span * 3 / 4}
}

// serveIdle measures the serve process alone, idle.
func (m *costMeter) serveIdle(ctx context.Context) { m.serve = m.idleRate(ctx, 2*time.Second) }

// workersIdle waits (up to 20s) until every worker process's asynq
// servers have announced themselves, then measures them idle.
func (m *costMeter) workersIdle(ctx context.Context, c *redisCost, processes int) {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		srv, _ := m.insp.Servers()
		pids := map[int]bool{}
		for _, x := range srv {
			pids[x.PID] = true
		}
		if len(pids) >= processes {
			break
		}
	}
	time.Sleep(time.Second) // past their first polls and heartbeats
	c.IdleCmdsPerSec = (m.idleRate(ctx, 3*time.Second) - m.serve) / float64(processes)
}

// observe is called from the run's loop with the time since it started.
func (m *costMeter) observe(ctx context.Context, elapsed time.Duration) {
	switch {
	case m.start.at.IsZero() && elapsed >= m.from:
		m.start = sampleRedis(ctx, m.rdb)
	case !m.start.at.IsZero() && m.end.at.IsZero() && elapsed >= m.to:
		m.end = sampleRedis(ctx, m.rdb)
	}
}

// saturated fills in the marginal figures from the LLM calls the
// provider recorded for every model.
func (m *costMeter) saturated(c *redisCost, f *fakeopenai.Server, models []string) {
	if m.start.at.IsZero() || m.end.at.IsZero() {
		return
	}
	n := 0
	seen := map[string]bool{}
	for _, model := range models {
		if seen[model] {
			continue
		}
		seen[model] = true
		for _, a := range f.Admissions(model) {
			if !a.At.Before(m.start.at) && a.At.Before(m.end.at) {
				n++
			}
		}
	}
	c.WindowS = m.end.at.Sub(m.start.at).Seconds()
	if n > 0 {
		c.MarginalCmdsPerJob = float64(m.end.cmds-m.start.cmds) / float64(n)
		c.CPUMsPerCall = (m.end.cpuMs - m.start.cpuMs) / float64(n)
		for name, v := range m.end.by {
			if d := v - m.start.by[name]; d > 0 {
				c.TopPerJob = append(c.TopPerJob, commandShare{name, float64(d) / float64(n)})
			}
		}
		sort.Slice(c.TopPerJob, func(i, j int) bool { return c.TopPerJob[i].PerJob > c.TopPerJob[j].PerJob })
		c.TopPerJob = c.TopPerJob[:min(len(c.TopPerJob), 12)]
	}
}

// idleRate is commands per second over d with nothing to do (one
// reading's own INFO subtracted).
func (m *costMeter) idleRate(ctx context.Context, d time.Duration) float64 {
	a := sampleRedis(ctx, m.rdb)
	time.Sleep(d)
	b := sampleRedis(ctx, m.rdb)
	return float64(b.cmds-a.cmds-1) / b.at.Sub(a.at).Seconds()
}
