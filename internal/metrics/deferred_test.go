package metrics

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/redistest"
)

// The hot counters (LLM calls, forge requests) wait in the process: no
// command per count; another process sees them once sent, in one
// pipeline; the process's own reading sends them first; Close sends what
// is left; other counters go at once.
func TestDeferredCounts(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	sent := &countingCounts{Counts: rdb}
	worker := New(nil, nil, sent, Config{SendEvery: time.Hour}) // sent by the reading and Close only
	for i := 0; i < 3; i++ {
		worker.CountCall("m", "ok")
	}
	worker.CountCall("m", "rate_limited")
	worker.CountLifecycle("job_skipped", "deleted") // not deferred
	if incrs, _ := sent.sent(); incrs != 1 {
		t.Fatalf("%d HINCRBY sent at once, want 1 (the life-cycle count only)", incrs)
	}
	if got := CallCounts(ctx, rdb); len(got) != 0 {
		t.Fatalf("another process reads %v before the send, want nothing yet", got)
	}
	if got := CallCounts(ctx, worker.Counts()); got["m"]["ok"] != 3 || got["m"]["rate_limited"] != 1 {
		t.Fatalf("the process's own reading %v, want its 3 ok and 1 rate_limited", got)
	}
	if incrs, pipelines := sent.sent(); pipelines < 1 || incrs != 1 {
		t.Errorf("sent in %d pipelines and %d single HINCRBY, want pipelines only", pipelines, incrs)
	}
	worker.CountCall("m", "ok")
	if err := worker.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := CallCounts(ctx, rdb); got["m"]["ok"] != 4 {
		t.Errorf("after Close another process reads %v, want 4 ok", got)
	}
	worker.CountCall("m", "ok") // after Close: at once
	if got := CallCounts(ctx, rdb); got["m"]["ok"] != 5 {
		t.Errorf("a count after Close: %v, want 5 ok", got)
	}
}

// A send that fails keeps its counts for the next one.
func TestDeferredCountsKeptWhenTheSendFails(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	flaky := &countingCounts{Counts: rdb, fail: true}
	d := NewDeferred(flaky, time.Hour)
	t.Cleanup(func() { _ = d.Close(ctx) })
	d.HIncrBy(ctx, githubKey, "write|ok", 2)
	if err := d.Flush(ctx); err == nil {
		t.Fatal("Flush over a failing Redis: no error")
	}
	flaky.setFail(false)
	if err := d.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.HGet(ctx, githubKey, "write|ok").Int(); err != nil || n != 2 {
		t.Errorf("after the failed send and a good one Redis holds %d (%v), want 2", n, err)
	}
}

// An increment Redis refuses (the field holds no integer) is dropped, not
// sent again every second; the others of its pipeline are counted.
func TestDeferredCountsDropWhatRedisRefuses(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	if err := rdb.HSet(ctx, githubKey, "refused|ok", "not a number").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.HDel(ctx, githubKey, "refused|ok", "kept|ok") })
	counted := &countingCounts{Counts: rdb}
	d := NewDeferred(counted, time.Hour)
	t.Cleanup(func() { _ = d.Close(ctx) })
	d.HIncrBy(ctx, githubKey, "refused|ok", 1)
	d.HIncrBy(ctx, githubKey, "kept|ok", 3)
	if err := d.Flush(ctx); err == nil {
		t.Fatal("Flush with a refused increment: no error")
	}
	if n, err := rdb.HGet(ctx, githubKey, "kept|ok").Int(); err != nil || n != 3 {
		t.Errorf("the pipeline's other increment: Redis holds %d (%v), want 3", n, err)
	}
	_, before := counted.sent()
	if err := d.Flush(ctx); err != nil {
		t.Fatalf("the refused increment was kept and sent again: %v", err)
	}
	if _, after := counted.sent(); after != before {
		t.Errorf("a Flush with nothing pending sent %d pipelines", after-before)
	}
}

// countingCounts counts what reaches Redis, and fails pipelines when
// told.
type countingCounts struct {
	Counts
	mu               sync.Mutex
	incrs, pipelines int
	fail             bool
}

func (c *countingCounts) HIncrBy(ctx context.Context, key, field string, incr int64) *redis.IntCmd {
	c.mu.Lock()
	c.incrs++
	c.mu.Unlock()
	return c.Counts.HIncrBy(ctx, key, field, incr)
}

func (c *countingCounts) Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	c.mu.Lock()
	c.pipelines++
	fail := c.fail
	c.mu.Unlock()
	if fail {
		return nil, errors.New("connection refused")
	}
	return c.Counts.Pipelined(ctx, fn)
}

func (c *countingCounts) sent() (incrs, pipelines int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.incrs, c.pipelines
}

func (c *countingCounts) setFail(fail bool) {
	c.mu.Lock()
	c.fail = fail
	c.mu.Unlock()
}
