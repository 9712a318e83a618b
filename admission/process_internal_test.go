package admission

import (
	"context"
	"log/slog"
	"testing"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// TestFinishedJobsLeaveAtTheBeat: a job's end sends nothing; the next
// beat takes every job finished since out of the record in one HDEL,
// except one that started again meanwhile (its new entry stays).
func TestFinishedJobsLeaveAtTheBeat(t *testing.T) {
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	b, err := ratelimit.NewBucket(rdb, "m", "sk", ratelimit.Limits{RequestsPerPeriod: 10, TokensPerPeriod: 1000, Period: 60e9})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(rdb, map[string]*ratelimit.Bucket{"m": b}, nil, nil, Config{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	p := s.Process("proc-1")
	key := jobsKey("proc-1")
	for _, id := range []string{"a", "b", "c"} {
		if err := p.start(ctx, id, "q"); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	before := totalCommands(t, rdb)
	p.end("a")
	p.end("b")
	if n := totalCommands(t, rdb) - before - 1; n != 0 {
		t.Fatalf("two jobs' ends sent %d commands, want none", n)
	}
	if n := rdb.HLen(ctx, key).Val(); n != 3 {
		t.Fatalf("before the beat the record holds %d jobs, want the 3 (ends wait for it)", n)
	}
	if err := p.start(ctx, "b", "q"); err != nil { // b runs again
		t.Fatal(err)
	}
	dels := commandCalls(t, rdb, "hdel")
	if err := p.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if n := commandCalls(t, rdb, "hdel") - dels; n != 1 {
		t.Errorf("the beat sent %d HDEL, want 1", n)
	}
	got := rdb.HKeys(ctx, key).Val()
	if len(got) != 2 || !rdb.HExists(ctx, key, "b").Val() || !rdb.HExists(ctx, key, "c").Val() {
		t.Fatalf("after the beat the record holds %v, want b (running again) and c", got)
	}
	p.end("b")
	p.end("c")
	if err := p.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if rdb.Exists(ctx, key).Val() != 0 {
		t.Fatal("every job ended and a beat passed: the record is still there")
	}
}
