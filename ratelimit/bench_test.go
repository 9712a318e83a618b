package ratelimit_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// BenchmarkReserve measures decisions/s from one process (parallel
// clients) and reports Redis CPU time per decision from INFO commandstats.
func BenchmarkReserve(b *testing.B) {
	benchReserve(b, ratelimit.Limits{RequestsPerPeriod: 1 << 30, TokensPerPeriod: 1 << 30, Period: time.Minute})
}

// BenchmarkReserveWindow is the same for a window limiter with a
// sub-window; its window is short (1s of 120 slots), so slots leave the
// sums all the time, as they would at thousands of decisions a second.
func BenchmarkReserveWindow(b *testing.B) {
	benchReserve(b, ratelimit.Limits{RequestsPerPeriod: 1 << 30, TokensPerPeriod: 1 << 30, Period: time.Second,
		Limiter: ratelimit.LimiterWindow, SubWindow: 100 * time.Millisecond, SubWindowShare: 0.5})
}

// BenchmarkReserveWindowSaturated decides against a full window: every
// refusal computes its wait from the slots.
func BenchmarkReserveWindowSaturated(b *testing.B) {
	benchReserve(b, ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 100000, Period: time.Second, Limiter: ratelimit.LimiterWindow})
}

func benchReserve(b *testing.B, l ratelimit.Limits) {
	srv := redistest.Shared(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	defer rdb.Close()
	bk, err := ratelimit.NewBucket(rdb, "bench-"+b.Name(), "k", l)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	bk.Reserve(ctx, "warm", ratelimit.Cost{Requests: 1, Tokens: 1}) // load the script
	rdb.ConfigResetStat(ctx)
	b.ResetTimer()
	var i int64
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := time.Now().UnixNano() + i
			i++
			if _, err := bk.Reserve(ctx, strconv.FormatInt(n, 36), ratelimit.Cost{Requests: 1, Tokens: 100}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	if us := evalshaMicros(ctx, b, rdb); us > 0 {
		b.ReportMetric(us, "redis-µs/decision")
	}
}

func evalshaMicros(ctx context.Context, b *testing.B, rdb *redis.Client) float64 {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0
	}
	return ratelimit.CommandMicrosPerCall(info, "evalsha")
}

// BenchmarkSyncWindow measures a provider's headers synced into a window
// whose slots all hold charges (a second of 120 slots, on a stepped
// clock): the count as of the reply's age is what Redis works out.
func BenchmarkSyncWindow(b *testing.B) {
	srv := redistest.Shared(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	bk, err := ratelimit.NewBucket(rdb, "bench-"+b.Name(), "k", ratelimit.Limits{RequestsPerPeriod: 1 << 20, TokensPerPeriod: 1 << 30,
		Period: time.Second, Limiter: ratelimit.LimiterWindow})
	if err != nil {
		b.Fatal(err)
	}
	t := time.Unix(1_900_000_000, 0)
	bk.NowFunc = func() time.Time { return t }
	ctx := context.Background()
	for i := range 240 {
		if _, err := bk.Reserve(ctx, strconv.Itoa(i), ratelimit.Cost{Requests: 1, Tokens: 100}); err != nil {
			b.Fatal(err)
		}
		t = t.Add(time.Second / 240)
	}
	h := http.Header{}
	h.Set("x-ratelimit-remaining-requests", strconv.Itoa(1<<20))
	h.Set("x-ratelimit-remaining-tokens", strconv.Itoa(1<<30))
	rdb.ConfigResetStat(ctx)
	b.ResetTimer()
	for range b.N {
		if _, err := bk.Sync(ctx, http.StatusOK, h, 50*time.Millisecond); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if us := evalshaMicros(ctx, b, rdb); us > 0 {
		b.ReportMetric(us, "redis-µs/sync")
	}
}
