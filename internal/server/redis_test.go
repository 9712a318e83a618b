package server

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/redistest"
)

func TestEvictingRedisRefused(t *testing.T) {
	srv := redistest.New(t, "--maxmemory-policy", "allkeys-lru")
	opt, err := config.ParseRedisURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, err = Open(context.Background(), opt, false, log)
	if err == nil || !strings.Contains(err.Error(), "noeviction") {
		t.Fatalf("a Redis that evicts was accepted: %v", err)
	}
	rdb, err := Open(context.Background(), opt, true, log)
	if err != nil {
		t.Fatalf("--allow-eviction: %v", err)
	}
	rdb.Close()
}
