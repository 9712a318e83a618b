package admission_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

func totalCalls(ctx context.Context, rdb *redis.Client) int64 {
	info, _ := rdb.Info(ctx, "stats").Result()
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "total_commands_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

func usedMemory(ctx context.Context, rdb *redis.Client) int64 {
	info, _ := rdb.Info(ctx, "memory").Result()
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// BenchmarkAdmit measures admissions per second from one process and
// Redis commands per admitted ticket (register + admit + started +
// settle), with tickets spread over tiers and tenants.
func BenchmarkAdmit(b *testing.B) {
	srv := redistest.New(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := context.Background()
	bk, _ := ratelimit.NewBucket(rdb, "bench", "sk", ratelimit.Limits{RequestsPerPeriod: 1 << 30, TokensPerPeriod: 1 << 34, Period: time.Minute})
	s, _ := admission.New(rdb, map[string]*ratelimit.Bucket{"bench": bk}, nil, nil, admission.Config{}, discard)
	tiers := []string{"paid", "trial", "free"}
	for i := 0; i < b.N; i++ {
		s.Register(ctx, admission.Ticket{ID: "t" + strconv.Itoa(i), Queue: tiers[i%3], Model: "bench", Class: tiers[i%3],
			Tenant: strconv.Itoa(i % 50), PRSeq: int64(i / 4), Index: i % 4, Total: 4, Tokens: 1500})
	}
	rdb.ConfigResetStat(ctx)
	before := totalCalls(ctx, rdb)
	var sent countHook
	rdb.AddHook(&sent)
	b.ResetTimer()
	admitted := 0
	var ids []string
	for admitted < b.N {
		adm, _, err := s.Admit(ctx, "bench", 64)
		if err != nil {
			b.Fatal(err)
		}
		if len(adm) == 0 {
			b.Fatalf("stalled at %d of %d", admitted, b.N)
		}
		admitted += len(adm)
		for _, a := range adm {
			ids = append(ids, a.ID)
		}
	}
	b.StopTimer()
	admitCalls := totalCalls(ctx, rdb) - before
	for _, id := range ids {
		s.Started(ctx, "bench", id)
		s.Settle(ctx, "bench", id, ratelimit.Cost{Requests: 1, Tokens: 1200})
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "admissions/s")
	// round trips prq sends per job: register, its share of admit calls, started, settle
	b.ReportMetric(float64(sent.n.Load())/float64(b.N)+1, "client-cmds/job")
	// commands inside scripts count too (Redis counts each redis.call)
	b.ReportMetric(float64(totalCalls(ctx, rdb)-before)/float64(b.N)+1 /* register */, "redis-cmds/job")
	b.ReportMetric(float64(admitCalls)/float64(b.N), "admit-cmds/job")
}

// countHook counts the commands a client sends (a script call is one).
type countHook struct{ n atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// BenchmarkHeldMemory measures Redis memory per held job: the asynq task
// (scheduled ten years ahead, a 300-byte payload) plus its ticket.
func BenchmarkHeldMemory(b *testing.B) {
	srv := redistest.New(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := context.Background()
	bk, _ := ratelimit.NewBucket(rdb, "mem", "sk", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 100000})
	client := asynq.NewClientFromRedisClient(rdb)
	s, _ := admission.New(rdb, map[string]*ratelimit.Bucket{"mem": bk}, client, asynq.NewInspectorFromRedisClient(rdb), admission.Config{}, discard)
	payload := []byte(strings.Repeat("p", 300))
	base := usedMemory(ctx, rdb)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tk := admission.Ticket{ID: fmt.Sprintf("review-1.acme.api.%d-0123456789ab-%d", i/8, i%8), Queue: "paid", Model: "mem", Class: "paid",
			Tenant: strconv.Itoa(i % 40), PRSeq: int64(i / 8), Index: i % 8, Total: 8, Tokens: 2500}
		if _, err := s.Submit(ctx, asynq.NewTask("file:review", payload), tk); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(usedMemory(ctx, rdb)-base)/float64(b.N), "bytes/held-job")
}

// BenchmarkRoomToHandler measures the time from the moment the bucket
// has room for a job to the moment its handler starts, with the bucket
// (100 requests/s) as the bottleneck and an asynq server running the jobs.
func BenchmarkRoomToHandler(b *testing.B) {
	srv := redistest.New(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 20})
	defer rdb.Close()
	ctx := context.Background()
	const rate = 100 // requests per second
	bk, _ := ratelimit.NewBucket(rdb, "lat", "sk", ratelimit.Limits{RequestsPerPeriod: rate, BurstRequests: 1, TokensPerPeriod: 1 << 30, Period: time.Second})
	client := asynq.NewClientFromRedisClient(rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	s, _ := admission.New(rdb, map[string]*ratelimit.Bucket{"lat": bk}, client, insp, admission.Config{}, discard)
	n := max(b.N, 50)
	for i := 0; i < n; i++ {
		tk := admission.Ticket{ID: "l" + strconv.Itoa(i), Queue: "paid", Model: "lat", Class: "paid", Tenant: "1", Index: i, Total: n, Tokens: 1}
		s.Submit(ctx, asynq.NewTask("lat:job", []byte(tk.ID)), tk)
	}
	var mu sync.Mutex
	startAt := map[string]time.Time{}
	admAt := map[string]time.Time{}
	s.Observe = func(a admission.Admitted) {
		mu.Lock()
		admAt[a.ID] = a.Enqueued.Add(a.Waited)
		mu.Unlock()
	}
	done := make(chan struct{})
	server := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: 20, Queues: map[string]int{"paid": 1}, TaskCheckInterval: 20 * time.Millisecond, LogLevel: asynq.FatalLevel})
	mux := asynq.NewServeMux()
	mux.HandleFunc("lat:job", func(ctx context.Context, t *asynq.Task) error {
		mu.Lock()
		startAt[string(t.Payload())] = time.Now()
		if len(startAt) == n {
			close(done)
		}
		mu.Unlock()
		return s.Started(ctx, "lat", string(t.Payload()))
	})
	server.Start(mux)
	defer server.Shutdown()
	b.ResetTimer()
	rctx, cancel := context.WithCancel(ctx)
	go s.Run(rctx, admission.RunConfig{Capacity: func() int { return 20 }})
	select {
	case <-done:
	case <-time.After(time.Duration(n)*time.Second/rate + 30*time.Second):
		b.Fatal("jobs did not all start")
	}
	cancel()
	b.StopTimer()
	type rec struct{ adm, start time.Time }
	var recs []rec
	for id, a := range admAt {
		recs = append(recs, rec{a, startAt[id]})
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].adm.Before(recs[j].adm) })
	// With a burst of one request, the bucket has room for job k one
	// interval after job k-1 was admitted.
	var roomToAdm, admToStart, roomToStart []time.Duration
	for k := 1; k < len(recs); k++ {
		room := recs[k-1].adm.Add(time.Second / rate)
		roomToAdm = append(roomToAdm, max(recs[k].adm.Sub(room), 0))
		admToStart = append(admToStart, max(recs[k].start.Sub(recs[k].adm), 0))
		roomToStart = append(roomToStart, max(recs[k].start.Sub(room), 0))
	}
	q := func(d []time.Duration, p float64) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[min(len(d)-1, int(p*float64(len(d))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(roomToAdm, .99), "room-to-admit-p99-ms")
	b.ReportMetric(q(admToStart, .99), "admit-to-start-p99-ms")
	b.ReportMetric(q(roomToStart, .5), "room-to-start-p50-ms")
	b.ReportMetric(q(roomToStart, .99), "room-to-start-p99-ms")
}
