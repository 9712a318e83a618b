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

func TestMetricsScrapeCost(t *testing.T) {
	s, rdb := newTestServer(t, nil)
	for _, q := range jobs.Queues { // queues that exist cost their inspection
		if _, err := s.client.Enqueue(asynq.NewTask("probe", nil), asynq.Queue(q), asynq.ProcessIn(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	h := s.metrics.Handler()
	scrape := func() int64 {
		before := commandCalls(t, rdb)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
		if w.Code != 200 || !strings.Contains(w.Body.String(), "prq_bucket_limit_tokens_per_second") {
			t.Fatalf("scrape: %d\n%.500s", w.Code, w.Body.String())
		}
		return commandCalls(t, rdb) - before - 1
	}
	first, second := scrape(), scrape()
	t.Logf("redis commands per scrape: first %d, second %d", first, second)
}
