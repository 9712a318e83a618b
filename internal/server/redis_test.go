package server

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/redistest"
)

func TestEvictingRedisRefused(t *testing.T) {
	srv := redistest.New(t, "--maxmemory-policy", "allkeys-lru", "--appendonly", "yes")
	opt, err := config.ParseRedisURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, err = Open(context.Background(), opt, RedisChecks{}, log)
	if err == nil || !strings.Contains(err.Error(), "noeviction") {
		t.Fatalf("a Redis that evicts was accepted: %v", err)
	}
	rdb, err := Open(context.Background(), opt, RedisChecks{AllowEviction: true}, log)
	if err != nil {
		t.Fatalf("--allow-eviction: %v", err)
	}
	rdb.Close()
}

// TestRedisWithoutPersistenceRefused: a Redis with neither AOF nor RDB
// loses every queued job on restart; prq refuses it unless told.
func TestRedisWithoutPersistenceRefused(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	tests := []struct {
		name  string
		args  []string
		allow bool
		want  string // "" when accepted
	}{
		{"neither AOF nor RDB", []string{"--save", "", "--appendonly", "no"}, false, "--allow-no-persistence"},
		{"neither, allowed", []string{"--save", "", "--appendonly", "no"}, true, ""},
		{"AOF", []string{"--save", "", "--appendonly", "yes"}, false, ""},
		{"RDB", []string{"--save", "3600 1", "--appendonly", "no"}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.New(t, tt.args...)
			if !srv.Real() {
				t.Skip("needs a real redis-server")
			}
			opt, err := config.ParseRedisURL(srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			rdb, err := Open(context.Background(), opt, RedisChecks{AllowNoPersistence: tt.allow}, log)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				rdb.Close()
				return
			}
			if err == nil {
				rdb.Close()
				t.Fatal("a Redis without persistence was accepted")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("the error does not say how to proceed (%q): %v", tt.want, err)
			}
		})
	}
}

// TestEmbeddedRedisNotWarnedAbout: the demo's in-process Redis answers
// no CONFIG GET; Open warns about that for any Redis but the one the
// process says it embeds.
func TestEmbeddedRedisNotWarnedAbout(t *testing.T) {
	mr := miniredis.RunT(t)
	for _, tt := range []struct {
		name string
		opt  asynq.RedisConnOpt
		warn bool
	}{
		{"a Redis of the deployment", asynq.RedisClientOpt{Addr: mr.Addr()}, true},
		{"the process's own", Embedded{asynq.RedisClientOpt{Addr: mr.Addr()}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			rdb, err := Open(context.Background(), tt.opt, RedisChecks{}, slog.New(slog.NewTextHandler(&out, nil)))
			if err != nil {
				t.Fatal(err)
			}
			rdb.Close()
			if got := strings.Contains(out.String(), "level=WARN"); got != tt.warn {
				t.Errorf("warned %v, want %v:\n%s", got, tt.warn, out.String())
			}
		})
	}
}
