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
