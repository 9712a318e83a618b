// Package dispatch spares Redis asynq's idle polling. An asynq server
// with nothing to do dequeues every TaskCheckInterval: one script per
// queue (EXISTS paused, RPOPLPUSH), which for prq's worker processes was
// most of Redis's load while admission held the work back.
//
// A Gate is a go-redis hook on the client asynq uses. As a writer, after
// any asynq script that put a task on a queue's pending list (enqueue,
// RunTask, the forwarder's moves, the requeue at shutdown) it publishes
// the queue's name on one channel. As a reader (after Listen), it
// remembers the queues whose last real dequeue found nothing and answers
// asynq's next dequeues of them itself (redis.Nil) until a wake names the
// queue, or until Recheck has passed since the last real look: a push by
// a writer without the hook (asynqmon's "run" button) costs at most
// Recheck of delay, never a job. Wakes lost while the subscription was
// down are made good when it is back: the resubscription wakes every
// queue.
//
// The gate also answers asynq's forwarder for a queue's scheduled set
// (every DelayedTaskCheckInterval, each queue): prq schedules nothing
// there but held tasks, due ten years ahead, so that look is made for
// real only once per Recheck. A scheduled task due sooner (a writer
// other than prq) is forwarded at most Recheck late. The retry sets,
// which prq's retries use, are forwarded as asynq does.
package dispatch

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Channel is where pushes are announced: the queue names, comma-separated.
const Channel = "prq:dispatch:wake"

// Gate is the hook; install it with rdb.AddHook(g) before asynq uses rdb.
type Gate struct {
	rdb redis.UniversalClient
	// Recheck bounds how long a queue is answered locally without a real
	// look. Defaults to DefaultRecheck.
	Recheck time.Duration
	// Now is the clock (tests). Defaults to time.Now.
	Now func() time.Time

	mu        sync.Mutex
	queues    map[string]*queueState
	listening atomic.Bool

	local, real  atomic.Int64 // dequeues answered locally / sent to Redis
	quiet        atomic.Int64 // forwards of a scheduled set answered locally
	resubscribed atomic.Int64 // subscriptions after the first
}

type queueState struct {
	empty     bool      // the last real dequeue found nothing, and no wake since
	gen       uint64    // wakes seen
	checked   time.Time // the last real dequeue that found nothing
	scheduled time.Time // the last real forward of the scheduled set that moved nothing
}

// DefaultRecheck is the gate's Recheck unless set: the delay a push that
// nobody announced can cost, and how often an idle worker process looks
// at each queue for real (one script per queue).
const DefaultRecheck = 30 * time.Second

// New returns a gate that publishes and listens through rdb.
func New(rdb redis.UniversalClient) *Gate {
	return &Gate{rdb: rdb, Recheck: DefaultRecheck, Now: time.Now, queues: map[string]*queueState{}}
}

// Listen subscribes to the wakes and gates dequeues until ctx ends; it
// returns once the subscription is in place (or failed: then the gate
// only publishes, and asynq polls as it would without it).
func (g *Gate) Listen(ctx context.Context) error {
	sub := g.rdb.Subscribe(ctx, Channel)
	if _, err := sub.Receive(ctx); err != nil {
		sub.Close()
		return err
	}
	// subscriptions as well as messages: a subscription after the first
	// is go-redis resubscribing on a new connection, and what was
	// published meanwhile is lost
	ch := sub.ChannelWithSubscriptions()
	g.listening.Store(true)
	go func() {
		defer sub.Close()
		defer g.listening.Store(false)
		for {
			select {
			case <-ctx.Done():
				return
			case msg, ok := <-ch:
				if !ok {
					return
				}
				switch m := msg.(type) {
				case *redis.Message:
					g.Wake(strings.Split(m.Payload, ",")...)
				case *redis.Subscription:
					g.resubscribed.Add(1)
					g.WakeAll()
				}
			}
		}
	}()
	return nil
}

// WakeAll makes the next dequeue of every queue a real one.
func (g *Gate) WakeAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, st := range g.queues {
		st.empty = false
		st.gen++
	}
}

// Wake makes the next dequeue of each queue a real one.
func (g *Gate) Wake(queues ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, q := range queues {
		st := g.state(q)
		st.empty = false
		st.gen++
	}
}

// Empty reports whether this process knows queue q empty: its last real
// dequeue found nothing, no wake came since, and the re-check is not due.
func (g *Gate) Empty(q string) bool {
	if !g.listening.Load() {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.queues[q]
	return st != nil && st.empty && g.Now().Sub(st.checked) < g.Recheck
}

// Stats reports the dequeues answered locally and those sent to Redis.
func (g *Gate) Stats() (local, real int64) { return g.local.Load(), g.real.Load() }

func (g *Gate) state(q string) *queueState {
	st := g.queues[q]
	if st == nil {
		st = &queueState{}
		g.queues[q] = st
	}
	return st
}

// DialHook implements redis.Hook.
func (g *Gate) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook implements redis.Hook: asynq runs its scripts
// outside pipelines.
func (g *Gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProcessHook implements redis.Hook.
func (g *Gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		keys := scriptKeys(cmd)
		if len(keys) == 0 {
			return next(ctx, cmd)
		}
		if q, ok := dequeueOf(keys); ok {
			return g.dequeue(ctx, next, cmd, q)
		}
		if q, ok := scheduledForwardOf(keys); ok && g.scheduledQuiet(q) {
			if c, ok := cmd.(*redis.Cmd); ok {
				g.quiet.Add(1)
				c.SetVal(int64(0)) // asynq's answer: nothing moved
				return nil
			}
		} else if ok {
			defer g.forwarded(q, cmd)
		}
		err := next(ctx, cmd)
		if err == nil && pushed(cmd) {
			var qs []string
			for _, k := range keys {
				if q, ok := queueOf(k, ":pending"); ok {
					qs = append(qs, q)
				}
			}
			if len(qs) > 0 {
				g.Wake(qs...) // this process's own servers at once
				// others through Redis; a lost one costs them Recheck
				_ = g.rdb.Publish(context.WithoutCancel(ctx), Channel, strings.Join(qs, ",")).Err()
			}
		}
		return err
	}
}

// dequeue answers locally while q is known empty, else asks Redis and
// learns from the answer.
func (g *Gate) dequeue(ctx context.Context, next redis.ProcessHook, cmd redis.Cmder, q string) error {
	if !g.listening.Load() {
		return next(ctx, cmd)
	}
	g.mu.Lock()
	st := g.state(q)
	if st.empty && g.Now().Sub(st.checked) < g.Recheck {
		g.mu.Unlock()
		g.local.Add(1)
		cmd.SetErr(redis.Nil)
		return redis.Nil
	}
	gen := st.gen
	g.mu.Unlock()
	g.real.Add(1)
	err := next(ctx, cmd)
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case err == redis.Nil && st.gen == gen: // no wake while Redis looked
		st.empty, st.checked = true, g.Now()
	case err == nil: // there may be more
		st.empty = false
	}
	return err
}

// scheduledQuiet reports whether a forward of q's scheduled set may be
// answered here (nothing moved): a real one found nothing due within
// Recheck.
func (g *Gate) scheduledQuiet(q string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.state(q)
	return !st.scheduled.IsZero() && g.Now().Sub(st.scheduled) < g.Recheck
}

// forwarded learns from a real forward of q's scheduled set: one that
// moved nothing starts a quiet Recheck.
func (g *Gate) forwarded(q string, cmd redis.Cmder) {
	c, ok := cmd.(*redis.Cmd)
	if !ok || c.Err() != nil {
		return
	}
	if n, ok := c.Val().(int64); ok && n == 0 {
		g.mu.Lock()
		g.state(q).scheduled = g.Now()
		g.mu.Unlock()
	}
}

// scriptKeys returns the keys of an EVAL or EVALSHA, else nil.
func scriptKeys(cmd redis.Cmder) []string {
	name := cmd.Name()
	if name != "evalsha" && name != "eval" && name != "evalsha_ro" && name != "eval_ro" {
		return nil
	}
	args := cmd.Args()
	if len(args) < 3 {
		return nil
	}
	var n int
	switch v := args[2].(type) {
	case int:
		n = v
	case int64:
		n = int(v)
	default:
		return nil
	}
	if n <= 0 || len(args) < 3+n {
		return nil
	}
	keys := make([]string, 0, n)
	for _, a := range args[3 : 3+n] {
		s, ok := a.(string)
		if !ok {
			return nil
		}
		keys = append(keys, s)
	}
	return keys
}

// dequeueOf recognises asynq's dequeue script by its keys: pending,
// paused, active and lease of one queue.
func dequeueOf(keys []string) (string, bool) {
	if len(keys) != 4 {
		return "", false
	}
	q, ok := queueOf(keys[0], ":pending")
	if !ok {
		return "", false
	}
	p, ok := queueOf(keys[1], ":paused")
	return q, ok && p == q
}

// scheduledForwardOf recognises asynq's forward script run on a queue's
// scheduled set by its keys: the scheduled set and the pending list of
// one queue.
func scheduledForwardOf(keys []string) (string, bool) {
	if len(keys) != 2 {
		return "", false
	}
	q, ok := queueOf(keys[0], ":scheduled")
	if !ok {
		return "", false
	}
	p, ok := queueOf(keys[1], ":pending")
	return q, ok && p == q
}

// queueOf returns q of a key "asynq:{q}" + suffix.
func queueOf(key, suffix string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "asynq:{")
	if !ok {
		return "", false
	}
	q, ok := strings.CutSuffix(rest, "}"+suffix)
	if !ok || q == "" || strings.ContainsAny(q, "{}") {
		return "", false
	}
	return q, true
}

// pushed reports whether a script's reply says it did something: asynq's
// scripts that move a task to pending answer a positive count (or OK);
// 0, a negative code or nil means nothing moved. A wake for a script that
// only touched the list (a delete) costs one real dequeue per process.
func pushed(cmd redis.Cmder) bool {
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return true
	}
	switch v := c.Val().(type) {
	case int64:
		return v > 0
	case nil:
		return false
	default:
		return true
	}
}
