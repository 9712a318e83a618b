// Package dispatch spares Redis asynq's idle polling. An asynq server
// with nothing to do dequeues every TaskCheckInterval: one script per
// queue (EXISTS paused, RPOPLPUSH), which for prq's worker processes was
// most of Redis's load while admission held the work back.
//
// A Gate is a go-redis hook on the client asynq uses. As a writer, after
// any script that put a task on a queue's pending list (asynq's enqueue,
// RunTask, the forwarder's moves, the requeue at shutdown; admission's
// release) it publishes the queue's name on one channel. As a reader
// (after Listen), it remembers the queues whose last real dequeue found
// nothing and answers asynq's next dequeues of them itself (redis.Nil)
// until a wake names the queue, or until Recheck has passed since the
// last real look: a push by a writer without the hook (asynqmon's "run"
// button) costs at most Recheck of delay, never a job. Wakes lost while
// the subscription was down are made good when it is back: the
// resubscription wakes every queue.
//
// After a wake a queue's dequeues are real until one finds nothing, but
// a process knows its own pushes: when the script's reply counts the
// tasks it pushed, the gate keeps them as credits, and once its servers
// have dequeued that many with no other wake since the last empty look,
// the queue is known empty again without that look. Another process may
// take some of them: the credits then outlast the tasks and the next
// real dequeue finds nothing, as it would without credits. The publish
// names its gate, so a gate ignores its own wakes coming back.
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
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Channel is where pushes are announced: the queue names and then the
// publishing gate's id in braces, comma-separated ("paid,{3f9a…}"). A
// queue name never holds a brace (queueOf), so the id is never taken
// for a queue; a reader that splits on commas and wakes every element
// (prq before the id) wakes the queues and one name of no queue per
// publishing gate.
const Channel = "prq:dispatch:wake"

// Gate is the hook; install it with rdb.AddHook(g) before asynq uses rdb.
type Gate struct {
	rdb redis.UniversalClient
	id  string // random: tells this gate's wakes from others'
	// Recheck bounds how long a queue is answered locally without a real
	// look. Defaults to DefaultRecheck.
	Recheck time.Duration
	// Now is the clock (tests). Defaults to time.Now.
	Now func() time.Time

	mu        sync.Mutex
	queues    map[string]*queueState
	listening atomic.Bool

	// alone: the last wake this gate published reached only its own
	// subscription, and no other gate's wake came since; published: when
	// (unix ns). Alone, it publishes at most once an AloneEvery.
	alone     atomic.Bool
	published atomic.Int64

	local, real  atomic.Int64 // dequeues answered locally / sent to Redis
	quiet        atomic.Int64 // forwards of a scheduled set answered locally
	resubscribed atomic.Int64 // subscriptions after the first
}

type queueState struct {
	// empty: known empty, by the last real dequeue that found nothing or
	// by the last of the credits, with no wake since
	empty bool
	gen   uint64 // wakes and own pushes seen
	// credits counts the tasks this gate pushed and has not dequeued;
	// open says the queue may hold tasks they do not count (a wake from
	// elsewhere, a push of unknown count, no empty look yet), and then
	// only a real dequeue that finds nothing knows it empty
	credits   int64
	open      bool
	checked   time.Time // when it was last known empty (the re-check's start)
	scheduled time.Time // the last real forward of the scheduled set that moved nothing
}

// DefaultRecheck is the gate's Recheck unless set: the delay a push that
// nobody announced can cost, and how often an idle worker process looks
// at each queue for real (one script per queue).
const DefaultRecheck = 30 * time.Second

// New returns a gate that publishes and listens through rdb.
func New(rdb redis.UniversalClient) *Gate {
	return &Gate{rdb: rdb, id: fmt.Sprintf("%016x", rand.Uint64()), Recheck: DefaultRecheck, Now: time.Now, queues: map[string]*queueState{}}
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
					if qs, from := parseWake(m.Payload); from != g.id {
						g.alone.Store(false) // another process pushes: it listens too
						g.Wake(qs...)
					} // else this gate's own push, counted when it was made
				case *redis.Subscription:
					g.resubscribed.Add(1)
					g.WakeAll()
				}
			}
		}
	}()
	return nil
}

// parseWake splits a wake's payload into its queues and the id of the
// gate that published it ("" from a writer that names none).
func parseWake(payload string) (queues []string, from string) {
	for _, e := range strings.Split(payload, ",") {
		if id, ok := strings.CutPrefix(e, "{"); ok {
			from = strings.TrimSuffix(id, "}")
			continue
		}
		queues = append(queues, e)
	}
	return queues, from
}

// WakeAll makes the dequeues of every queue real until one finds nothing.
func (g *Gate) WakeAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, st := range g.queues {
		st.wake()
	}
}

// Wake makes the dequeues of each queue real until one finds nothing: a
// push of tasks this gate did not count.
func (g *Gate) Wake(queues ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, q := range queues {
		g.state(q).wake()
	}
}

func (st *queueState) wake() {
	st.empty, st.open = false, true
	st.gen++
}

// credit records this gate's own push of n tasks to q.
func (g *Gate) credit(q string, n int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.state(q)
	st.empty = false
	st.credits += n
	st.gen++
}

// Empty reports whether this process knows queue q empty: its last real
// dequeue found nothing, or took the last task it had pushed itself
// with no other push announced since that look; no wake came since; and
// the re-check is not due.
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
		st = &queueState{open: true} // never looked at: anything may wait
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
		if err != nil {
			return err
		}
		var qs []string
		for _, k := range keys {
			if q, ok := queueOf(k, ":pending"); ok {
				qs = append(qs, q)
			}
		}
		if len(qs) == 0 {
			return nil
		}
		n := pushCount(cmd, keys)
		switch {
		case n == 0:
			return nil
		case n > 0 && len(qs) == 1:
			g.credit(qs[0], n) // this process's own servers at once
		default:
			g.Wake(qs...)
		}
		g.publish(ctx, strings.Join(qs, ",")+",{"+g.id+"}")
		return nil
	}
}

// AloneEvery is how often a gate alone on the channel still publishes
// its wakes: the reply counts the listeners, so a process that starts is
// heard of within it (and at once when it pushes itself). Until then its
// servers poll as a new process does, and the pushes this process makes
// are its own servers' to take (admission released them to its slots).
const AloneEvery = time.Second

// publish tells the other processes of a push (a lost wake costs them
// Recheck), except while this gate is alone on the channel, at most
// once an AloneEvery then.
func (g *Gate) publish(ctx context.Context, msg string) {
	now := g.Now().UnixNano()
	if g.listening.Load() && g.alone.Load() && now-g.published.Load() < int64(AloneEvery) {
		return
	}
	n, err := g.rdb.Publish(context.WithoutCancel(ctx), Channel, msg).Result()
	// listening, this gate's own subscription is one of n
	g.alone.Store(err == nil && g.listening.Load() && n <= 1)
	g.published.Store(now)
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
		st.credits, st.open = 0, false
	case err == nil:
		// one of this gate's own pushes, if any is left to count: once
		// all are, and nothing else may have come, the queue is empty
		// (or another process took some: the next real look finds
		// nothing, as it would without credits)
		st.empty = false
		if st.credits > 0 {
			st.credits--
			if st.credits == 0 && !st.open {
				st.empty, st.checked = true, g.Now()
			}
		}
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

// pushCount returns how many tasks a script's reply says it put on the
// pending list, at least as many as it did (a count too high costs one
// real dequeue that finds nothing): asynq's scripts that push answer 1
// or the count they moved (a delete's count too), admission's release
// (pending, scheduled, retry, archived and completed, then a task hash
// each) a code per task, 1 for a push. 0 means nothing was pushed (0, a
// negative code, nil, a release's codes without a 1), -1 a push of
// unknown count (OK, any other reply).
func pushCount(cmd redis.Cmder, keys []string) int64 {
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return -1
	}
	switch v := c.Val().(type) {
	case int64:
		return max(v, 0)
	case nil:
		return 0
	case []interface{}:
		if !releaseOf(keys) || len(v) != len(keys)-5 {
			return -1
		}
		var n int64
		for _, code := range v {
			code, ok := code.(int64)
			if !ok {
				return -1
			}
			if code == 1 {
				n++
			}
		}
		return n
	default:
		return -1
	}
}

// releaseOf recognises admission's release script by its keys.
func releaseOf(keys []string) bool {
	if len(keys) < 6 {
		return false
	}
	q, _ := queueOf(keys[0], ":pending")
	for i, suffix := range []string{":scheduled", ":retry", ":archived", ":completed"} {
		if p, ok := queueOf(keys[1+i], suffix); !ok || p != q {
			return false
		}
	}
	return q != ""
}
