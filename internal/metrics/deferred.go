package metrics

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// deferredKeys are the counters bumped on every LLM call and every forge
// request: added up in the process and sent together.
var deferredKeys = map[string]bool{callsKey: true, githubKey: true, gitlabKey: true}

// Deferred is Counts whose hot counters (LLM calls by model and outcome,
// GitHub's and GitLab's requests) are added up in the process and sent
// every interval (a second) in one pipeline: one round trip a second instead of
// one HINCRBY per call and per forge request. Other keys' increments go
// at once. A read (HGetAll) sends what is pending first, so a process
// reads its own counts; another process sees them within the interval. A
// process that dies loses at most that last interval's counts (they are
// metrics, not accounting: spend and quotas are written at once).
type Deferred struct {
	next  Counts
	every time.Duration
	mu    sync.Mutex
	// pending increments by key and field
	pending map[[2]string]int64
	once    sync.Once
	stop    chan struct{}
	done    chan struct{}
	closed  bool
}

var _ Counts = (*Deferred)(nil)

// NewDeferred returns counters over next, sent every interval. Its
// sender starts with the first deferred increment; Close stops it and
// sends what is left.
func NewDeferred(next Counts, every time.Duration) *Deferred {
	return &Deferred{next: next, every: every, pending: map[[2]string]int64{}, stop: make(chan struct{}), done: make(chan struct{})}
}

// HIncrBy adds incr to key's field: later, for the hot counters (the
// reply then holds the increment alone), else at once.
func (d *Deferred) HIncrBy(ctx context.Context, key, field string, incr int64) *redis.IntCmd {
	if !deferredKeys[key] {
		return d.next.HIncrBy(ctx, key, field, incr)
	}
	d.mu.Lock()
	closed := d.closed
	if !closed {
		d.pending[[2]string{key, field}] += incr
	}
	d.mu.Unlock()
	if closed { // after Close: nothing would send it
		return d.next.HIncrBy(ctx, key, field, incr)
	}
	d.once.Do(func() { go d.loop() })
	cmd := redis.NewIntCmd(ctx, "hincrby", key, field, incr)
	cmd.SetVal(incr)
	return cmd
}

// HGetAll sends what is pending, then reads key.
func (d *Deferred) HGetAll(ctx context.Context, key string) *redis.MapStringStringCmd {
	if deferredKeys[key] {
		_ = d.Flush(ctx) // a failed send stays pending; the read says what Redis has
	}
	return d.next.HGetAll(ctx, key)
}

// Pipelined runs fn on the next Counts' pipeline.
func (d *Deferred) Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	return d.next.Pipelined(ctx, fn)
}

// Flush sends every pending increment in one pipeline. What fails to
// send stays pending for the next Flush; an increment Redis refused (a
// field that is not an integer, a key of another type) is dropped, as
// sending it again would fail again.
func (d *Deferred) Flush(ctx context.Context) error {
	d.mu.Lock()
	batch := d.pending
	d.pending = map[[2]string]int64{}
	d.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	cmds := make(map[[2]string]*redis.IntCmd, len(batch))
	_, err := d.next.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, n := range batch {
			cmds[k] = p.HIncrBy(ctx, k[0], k[1], n)
		}
		return nil
	})
	if err == nil {
		return nil
	}
	d.mu.Lock()
	for k, n := range batch {
		if c := cmds[k]; c == nil || (c.Err() != nil && !refused(c.Err())) {
			d.pending[k] += n
		}
	}
	d.mu.Unlock()
	return err
}

func (d *Deferred) loop() {
	defer close(d.done)
	t := time.NewTicker(d.every)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
			_ = d.Flush(context.Background()) // kept for the next tick
		}
	}
}

// Close stops the sender and sends what is pending (before the process
// closes Redis). Increments after Close go at once.
func (d *Deferred) Close(ctx context.Context) error {
	d.mu.Lock()
	already := d.closed
	d.closed = true
	d.mu.Unlock()
	if !already {
		started := true
		d.once.Do(func() { started = false })
		close(d.stop)
		if started {
			<-d.done
		}
	}
	return d.Flush(ctx)
}

// refused reports whether err is Redis's reply to the command (not a
// lost connection or a timeout).
func refused(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}
