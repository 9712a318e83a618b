package server

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/metrics"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
)

// commandCalls is the total of Redis's per-command call counters (INFO
// commandstats); each reading costs one INFO, which the next reading counts.
func commandCalls(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		_, rest, ok := strings.Cut(line, "calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		c, _ := strconv.ParseInt(v, 10, 64)
		n += c
	}
	return n
}

func newTestServer(t *testing.T, tune func(*config.Config)) (*Server, *redis.Client) {
	t.Helper()
	srv := redistest.New(t)
	cfg := config.Default()
	cfg.RedisURL = srv.URL()
	cfg.AllowNoPersistence = true // the test's Redis lives as long as the test
	if tune != nil {
		tune(&cfg)
	}
	conn, err := config.ParseRedisURL(cfg.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), &cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, srv.Client(t)
}

// TestMetricsScrapeCost: a scrape reads the shared state from Redis
// (about 150 commands with two models and four queues) once per
// metrics.cache_for; scrapes in between cost Redis nothing, and a scrape
// after the period reads afresh.
func TestMetricsScrapeCost(t *testing.T) {
	s, rdb := newTestServer(t, nil)
	for _, q := range jobs.Queues { // queues that exist cost their inspection
		if _, err := s.client.Enqueue(asynq.NewTask("probe", nil), asynq.Queue(q), asynq.ProcessIn(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Unix(1_700_000_000, 0)
	m := metrics.New(s.sched, s.insp, s.rdb, metrics.Config{CacheFor: 5 * time.Second, NowFunc: func() time.Time { return now }})
	h := m.Handler()
	scrape := func() (int64, string) {
		before := commandCalls(t, rdb)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
		if w.Code != 200 || !strings.Contains(w.Body.String(), `prq_queue_tasks{queue="paid",state="scheduled"} 1`) {
			t.Fatalf("scrape: %d\n%.500s", w.Code, w.Body.String())
		}
		return commandCalls(t, rdb) - before - 1, w.Body.String()
	}
	first, _ := scrape()
	var cached []int64
	for i := 0; i < 4; i++ {
		now = now.Add(time.Second)
		n, _ := scrape()
		cached = append(cached, n)
	}
	t.Logf("redis commands per scrape: first %d, then within cache_for %v", first, cached)
	if first < 20 {
		t.Fatalf("the first scrape cost %d commands: it did not read the shared state", first)
	}
	for _, n := range cached {
		if n != 0 {
			t.Fatalf("a scrape within cache_for cost %d redis commands, want 0", n)
		}
	}
	// after the period the state is read afresh: a new task shows
	if _, err := s.client.Enqueue(asynq.NewTask("probe", nil), asynq.Queue("paid"), asynq.ProcessIn(time.Hour)); err != nil {
		t.Fatal(err)
	}
	now = now.Add(5 * time.Second)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(w.Body.String(), `prq_queue_tasks{queue="paid",state="scheduled"} 2`) {
		t.Fatalf("the scrape after cache_for did not read afresh:\n%.2000s", w.Body.String())
	}
}

func probeTask() *asynq.Task { return asynq.NewTask("probe", nil) }

func queueOpt(q string) asynq.Option { return asynq.Queue(q) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestLifecycleCountsExported: what a worker's run reconciler and
// installation gate count (in Redis) serve exports as prq_lifecycle_total.
func TestLifecycleCountsExported(t *testing.T) {
	s, _ := newTestServer(t, nil)
	worker := metrics.New(s.sched, s.insp, s.rdb, metrics.Config{}) // another process's
	worker.CountLifecycle("run_finalized", "all_done")
	worker.CountLifecycle("job_skipped", "deleted")
	worker.CountLifecycle("job_skipped", "deleted")
	m := metrics.New(s.sched, s.insp, s.rdb, metrics.Config{CacheFor: -1})
	m.Watch(s.rdb, time.Minute)
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{`prq_lifecycle_total{event="run_finalized",reason="all_done"} 1`, `prq_lifecycle_total{event="job_skipped",reason="deleted"} 2`} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
}
