package admission_test

import (
	"context"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// redisCPU is Redis's CPU time so far (user + sys).
func redisCPU(ctx context.Context, rdb *redis.Client) time.Duration {
	info, _ := rdb.Info(ctx, "cpu").Result()
	var s float64
	for _, l := range strings.Split(info, "\n") {
		l = strings.TrimSpace(l)
		for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(l, k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				s += f
			}
		}
	}
	return time.Duration(s * float64(time.Second))
}

// BenchmarkWindowCall measures what one call costs Redis through a window
// limiter kept saturated, on a stepped clock (the same sequence every
// run): the admissions that admit it while others wait, its start, its
// call (waiting for room where admission looked ahead), its write, its
// reply's way and its settle. It reports Redis CPU and commands per
// call; compare variants side by side with -count and benchstat.
func BenchmarkWindowCall(b *testing.B) {
	srv := redistest.New(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := context.Background()
	const model = "wbench"
	lim := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 24000, Period: 6 * time.Second, Limiter: ratelimit.LimiterWindow}
	bk, err := ratelimit.NewBucket(rdb, model, "sk", lim)
	if err != nil {
		b.Fatal(err)
	}
	bk.ObserveWay(10 * time.Millisecond) // the margin measured: 20 ms
	clk := &clock{t: time.Unix(1_900_000_000, 0)}
	s, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: bk}, nil, nil, admission.Config{NowFunc: clk.now}, discard)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	tiers := []string{"paid", "trial", "free"}
	for i := 0; i < b.N; i++ {
		tk := admission.Ticket{ID: "w" + strconv.Itoa(i), Queue: tiers[i%3], Model: model, Class: tiers[i%3],
			Tenant: strconv.Itoa(i % 7), PRSeq: int64(i / 5), Index: i % 5, Total: 5, Tokens: 800 + rng.Int63n(2200)}
		if _, err := s.Register(ctx, tk); err != nil {
			b.Fatal(err)
		}
	}
	rdb.ConfigResetStat(ctx)
	cmds0, cpu0 := totalCalls(ctx, rdb), redisCPU(ctx, rdb)
	b.ResetTimer()
	called := 0
	for guard := 0; called < b.N && guard < 100*b.N+1000; guard++ {
		adm, wait, err := s.Admit(ctx, model, 16)
		if err != nil {
			b.Fatal(err)
		}
		for _, a := range adm {
			if _, err := callOnClock(ctx, s, clk, model, a.ID, ratelimit.Cost{Requests: 1, Tokens: 1000}); err != nil {
				b.Fatal(err)
			}
			called++
		}
		if len(adm) == 0 {
			clk.advance(max(wait, time.Millisecond))
		}
	}
	b.StopTimer()
	if called < b.N {
		b.Fatalf("called %d of %d", called, b.N)
	}
	b.ReportMetric(float64((redisCPU(ctx, rdb)-cpu0).Microseconds())/float64(b.N), "redis-cpu-µs/call")
	b.ReportMetric(float64(totalCalls(ctx, rdb)-cmds0)/float64(b.N), "redis-cmds/call")
}

// BenchmarkBucketCall measures what one call's own scripts cost Redis
// through a token bucket with open reservations of calls in flight (200:
// a few calls a second, each taking tens of seconds at the provider):
// its start, its call (the correction for what the provider has not seen
// yet) and its settle; registration and admission (in batches) are not
// counted. It reports Redis CPU and commands per call.
func BenchmarkBucketCall(b *testing.B) {
	srv := redistest.New(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := context.Background()
	const model, inFlight, batch = "bbench", 200, 50
	bk, err := ratelimit.NewBucket(rdb, model, "sk", ratelimit.Limits{RequestsPerPeriod: 1 << 30, TokensPerPeriod: 1 << 34, Period: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	s, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: bk}, nil, nil, admission.Config{}, discard)
	if err != nil {
		b.Fatal(err)
	}
	tiers := []string{"paid", "trial", "free"}
	admit := func(prefix string, from, n int) []string {
		ids := make([]string, 0, n)
		for i := from; i < from+n; i++ {
			tk := admission.Ticket{ID: prefix + strconv.Itoa(i), Queue: tiers[i%3], Model: model, Class: tiers[i%3],
				Tenant: strconv.Itoa(i % 7), PRSeq: int64(i / 5), Index: i % 5, Total: 5, Tokens: 1500}
			if _, err := s.Register(ctx, tk); err != nil {
				b.Fatal(err)
			}
			ids = append(ids, tk.ID)
		}
		if adm, _, err := s.Admit(ctx, model, n); err != nil || len(adm) != n {
			b.Fatalf("admitted %d of %d: %v", len(adm), n, err)
		}
		return ids
	}
	for _, id := range admit("f", 0, inFlight) {
		if err := s.Started(ctx, model, id); err != nil {
			b.Fatal(err)
		}
	}
	var cmds int64
	var cpu time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		b.StopTimer()
		ids := admit("b", done, min(batch, b.N-done))
		cmds0, cpu0 := totalCalls(ctx, rdb), redisCPU(ctx, rdb)
		b.StartTimer()
		for _, id := range ids {
			if err := s.Started(ctx, model, id); err != nil {
				b.Fatal(err)
			}
			if err := s.Calling(ctx, model, id); err != nil {
				b.Fatal(err)
			}
			if err := s.Settle(ctx, model, id, ratelimit.Cost{Requests: 1, Tokens: 1000}); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		cmds += totalCalls(ctx, rdb) - cmds0 - 2 // less the two INFO reads
		cpu += redisCPU(ctx, rdb) - cpu0
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "redis-cpu-µs/call")
	b.ReportMetric(float64(cmds)/float64(b.N), "redis-cmds/call")
}
