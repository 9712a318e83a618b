package admission_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redisproc"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// BenchmarkScale holds a large backlog — 100,000 jobs (asynq tasks held
// and their tickets) across 10,000 tenants of every tier and 4 models —
// in one Redis, then in a 3-master Redis Cluster, and reports what an
// operator sizing a deployment needs: Redis memory per held job, the
// latency of one admission decision at that depth (p50, p99), admissions
// per second from one process, and the time of a reconciler pass that
// scans the whole backlog for held tasks without a ticket. Run it alone
// (it fills Redis for about a minute):
//
//	go test -run '^$' -bench Scale -benchtime 1x -timeout 30m ./admission
//
// PRQ_SCALE_JOBS and PRQ_SCALE_TENANTS change the backlog's size.
func BenchmarkScale(b *testing.B) {
	jobs, tenants := envInt("PRQ_SCALE_JOBS", 100_000), envInt("PRQ_SCALE_TENANTS", 10_000)
	b.Run("redis", func(b *testing.B) {
		srv := redistest.New(b)
		opt := asynq.RedisClientOpt{Addr: srv.Addr}
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer rdb.Close()
		scale(b, rdb, opt, jobs, tenants, func(ctx context.Context) int64 { return usedMemory(ctx, rdb) })
	})
	b.Run("cluster", func(b *testing.B) {
		ctx := context.Background()
		c, err := redisproc.StartCluster(ctx)
		if err != nil {
			b.Skipf("no local Redis Cluster: %v", err)
		}
		defer c.Stop()
		addrs := strings.Split(strings.TrimPrefix(c.URL(), "redis-cluster://"), ",")
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		defer rdb.Close()
		scale(b, rdb, asynq.RedisClusterClientOpt{Addrs: addrs}, jobs, tenants, func(ctx context.Context) int64 {
			var mu sync.Mutex
			var total int64
			rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
				n := usedMemory(ctx, m)
				mu.Lock()
				total += n
				mu.Unlock()
				return nil
			})
			return total
		})
	})
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func scale(b *testing.B, rdb redis.UniversalClient, opt asynq.RedisConnOpt, jobs, tenants int, mem func(context.Context) int64) {
	ctx := context.Background()
	client := asynq.NewClient(opt)
	defer client.Close()
	insp := asynq.NewInspector(opt)
	defer insp.Close()
	models := []string{"m-a", "m-b", "m-c", "m-d"}
	buckets := map[string]*ratelimit.Bucket{}
	for _, m := range models {
		bk, err := ratelimit.NewBucket(rdb, m, "sk", ratelimit.Limits{RequestsPerPeriod: 1 << 30, TokensPerPeriod: 1 << 34, Period: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		buckets[m] = bk
	}
	s, err := admission.New(rdb, buckets, client, insp, admission.Config{}, discard)
	if err != nil {
		b.Fatal(err)
	}
	classes := []string{"chat", "paid", "trial", "paid", "free", "free", "trial", "free"}
	ticket := func(i int) admission.Ticket {
		c := classes[i%len(classes)]
		return admission.Ticket{ID: fmt.Sprintf("scale-%07d", i), Queue: c, Model: models[i%len(models)], Class: c,
			Tenant: strconv.Itoa(i % tenants), PRSeq: int64(i / 8), Index: i % 8, Total: 8, Tokens: 500 + int64(i%17)*100}
	}
	base := mem(ctx)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < jobs; i += 8 {
				t := ticket(i)
				payload, _ := json.Marshal(t)
				if _, err := s.Submit(ctx, asynq.NewTask("scale", payload), t); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	filled := time.Since(start)
	perJob := float64(mem(ctx)-base) / float64(jobs)
	b.Logf("%d jobs held across %d tenants and %d models in %s", jobs, tenants, len(models), filled.Round(time.Millisecond))

	// a reconciler pass that scans the whole backlog
	rc := admission.RunConfig{Capacity: func() int { return 0 }, Queues: []string{"chat", "paid", "trial", "free"},
		TicketOf: func(ti *asynq.TaskInfo) (admission.Ticket, bool) {
			var t admission.Ticket
			return t, json.Unmarshal(ti.Payload, &t) == nil
		}}
	t0 := time.Now()
	if err := s.Reconcile(ctx, rc, true); err != nil {
		b.Fatal(err)
	}
	pass := time.Since(t0)

	// one decision at a time: the latency an admission loop sees
	var lat []time.Duration
	for i := 0; i < 2000; i++ {
		t1 := time.Now()
		adm, _, err := s.Admit(ctx, models[i%len(models)], 1)
		if err != nil || len(adm) != 1 {
			b.Fatalf("admit at depth: %v %v", adm, err)
		}
		lat = append(lat, time.Since(t1))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	// throughput: batches of 64, as a loop with free slots takes them
	admitted := 0
	t2 := time.Now()
	for admitted < jobs/5 {
		adm, _, err := s.Admit(ctx, models[admitted%len(models)], 64)
		if err != nil || len(adm) == 0 {
			b.Fatalf("admit: %d %v", len(adm), err)
		}
		admitted += len(adm)
	}
	rate := float64(admitted) / time.Since(t2).Seconds()
	b.ReportMetric(perJob, "bytes/held-job")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "decision-p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "decision-p99-ms")
	b.ReportMetric(rate, "admissions/s")
	b.ReportMetric(pass.Seconds(), "reconcile-scan-s")
}
