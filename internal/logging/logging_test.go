package logging

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// TestAsynqJanitorWarningDropped: asynq warns on every server start
// that prq's janitor batch (500) is over its default; the warning is
// dropped, and asynq's other warnings still reach the log, once
// tagged component=asynq.
func TestAsynqJanitorWarningDropped(t *testing.T) {
	var out strings.Builder
	l := Asynq{Log: slog.New(slog.NewTextHandler(&out, nil))}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // NewServer does not connect
	defer rdb.Close()
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{JanitorBatchSize: 500, JanitorInterval: 30 * time.Second, Logger: l, LogLevel: asynq.WarnLevel})
	_ = srv
	if strings.Contains(out.String(), "Janitor") {
		t.Errorf("asynq's janitor warning was logged:\n%s", out.String())
	}
	l.Warn("could not ", "dequeue")
	got := out.String()
	if !strings.Contains(got, `level=WARN msg="could not dequeue" component=asynq`) || strings.Count(got, "component=") != 1 {
		t.Errorf("asynq's other warnings: got\n%s", got)
	}
}
