package dispatch

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/redistest"
)

// counter counts the dequeue scripts and the forwards of a scheduled
// set that reach Redis (installed after the gate, so it sees only what
// the gate lets through).
type counter struct{ n, fwd atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if keys := scriptKeys(cmd); keys != nil {
			if _, ok := dequeueOf(keys); ok {
				c.n.Add(1)
			}
			if _, ok := scheduledForwardOf(keys); ok {
				err := next(ctx, cmd)
				if err == nil { // not the first EVALSHA's NOSCRIPT
					c.fwd.Add(1)
				}
				return err
			}
		}
		return next(ctx, cmd)
	}
}

// worker is one simulated worker process: its own client with a gate,
// and an asynq server on queue "q" whose handler reports each task.
type worker struct {
	gate *Gate
	rdb  *redis.Client
	cnt  *counter
	srv  *asynq.Server
}

func startWorker(t *testing.T, r *redistest.Server, recheck time.Duration, ran chan<- string) *worker {
	t.Helper()
	return startWorkerWith(t, r, recheck, ran, asynq.Config{})
}

// startWorkerWith starts a worker whose asynq config is cfg with the
// worker's queue, concurrency and fast polling.
func startWorkerWith(t *testing.T, r *redistest.Server, recheck time.Duration, ran chan<- string, cfg asynq.Config) *worker {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &worker{rdb: r.Client(t), cnt: &counter{}}
	w.gate = New(w.rdb)
	w.gate.Recheck = recheck
	w.rdb.AddHook(w.gate)
	w.rdb.AddHook(w.cnt)
	if err := w.gate.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	cfg.Concurrency, cfg.Queues, cfg.TaskCheckInterval, cfg.LogLevel = 2, map[string]int{"q": 1}, 5*time.Millisecond, asynq.FatalLevel
	w.srv = asynq.NewServerFromRedisClient(w.rdb, cfg)
	if err := w.srv.Start(asynq.HandlerFunc(func(_ context.Context, task *asynq.Task) error {
		ran <- string(task.Payload())
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.srv.Shutdown)
	return w
}

// waitGated waits until the worker's gate has answered n dequeues itself.
func waitGated(t *testing.T, w *worker, n int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if l, _ := w.gate.Stats(); l >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the gate never answered a dequeue itself")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitRan(t *testing.T, ran <-chan string, want string) {
	t.Helper()
	select {
	case got := <-ran:
		if got != want {
			t.Fatalf("ran %q, want %q", got, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("task %q never ran", want)
	}
}

// An idle queue is answered locally: once the gate knows it empty, no
// dequeue reaches Redis until a wake (Recheck is far away here).
func TestGateAnswersLocallyWhileEmpty(t *testing.T) {
	r := redistest.New(t)
	w := startWorker(t, r, time.Hour, make(chan string, 1))
	waitGated(t, w, 1)
	before := w.cnt.n.Load()
	waitGated(t, w, 100)
	if after := w.cnt.n.Load(); after != before {
		t.Fatalf("%d dequeues reached Redis while the queue was known empty", after-before)
	}
	if !w.gate.Empty("q") || w.gate.Empty("other") {
		t.Fatal("Empty: want q known empty, a queue never looked at not")
	}
}

// Work released by another process (its own client and gate: the writer
// side) wakes every gated process: the task runs although no worker
// would look again for an hour on its own.
func TestReleaseWakesGatedProcesses(t *testing.T) {
	r := redistest.New(t)
	ran := make(chan string, 4)
	w1 := startWorker(t, r, time.Hour, ran)
	w2 := startWorker(t, r, time.Hour, ran)
	waitGated(t, w1, 1)
	waitGated(t, w2, 1)

	// the admitting process: a client with a gate that does not listen
	other := r.Client(t)
	other.AddHook(New(other))
	client := asynq.NewClientFromRedisClient(other)
	insp := asynq.NewInspectorFromRedisClient(other)
	// held, then released (admission's way)
	if _, err := client.Enqueue(asynq.NewTask("t", []byte("held")), asynq.Queue("q"), asynq.TaskID("held"), asynq.ProcessIn(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := insp.RunTask("q", "held"); err != nil {
		t.Fatal(err)
	}
	waitRan(t, ran, "held")
	// enqueued straight to pending
	waitGated(t, w1, 200)
	if _, err := client.Enqueue(asynq.NewTask("t", []byte("direct")), asynq.Queue("q")); err != nil {
		t.Fatal(err)
	}
	waitRan(t, ran, "direct")
}

// A push no wake announces (a writer without the hook) is found by the
// re-check; without it the task would wait for the next wake.
func TestRecheckFindsUnannouncedWork(t *testing.T) {
	r := redistest.New(t)
	ran := make(chan string, 1)
	w := startWorker(t, r, 50*time.Millisecond, ran)
	waitGated(t, w, 1)
	plain := asynq.NewClientFromRedisClient(r.Client(t))
	if _, err := plain.Enqueue(asynq.NewTask("t", []byte("quiet")), asynq.Queue("q")); err != nil {
		t.Fatal(err)
	}
	waitRan(t, ran, "quiet")
}

// The same push with the re-check an hour away is not found: the gate
// really holds the queue closed (the test above depends on the re-check).
func TestNoRecheckNoWakeStaysClosed(t *testing.T) {
	r := redistest.New(t)
	ran := make(chan string, 1)
	w := startWorker(t, r, time.Hour, ran)
	waitGated(t, w, 1)
	plain := asynq.NewClientFromRedisClient(r.Client(t))
	if _, err := plain.Enqueue(asynq.NewTask("t", []byte("quiet")), asynq.Queue("q")); err != nil {
		t.Fatal(err)
	}
	l, _ := w.gate.Stats()
	waitGated(t, w, l+100) // a hundred more looks, all local
	select {
	case p := <-ran:
		t.Fatalf("ran %q without a wake or a re-check", p)
	default:
	}
	w.gate.Wake("q")
	waitRan(t, ran, "quiet")
}

// A wake that arrives while a real dequeue is on its way to Redis keeps
// the queue open even if that dequeue finds nothing: the push it
// announces may have landed just after the look.
func TestWakeDuringLookKeepsQueueOpen(t *testing.T) {
	r := redistest.New(t)
	rdb := r.Client(t)
	g := New(rdb)
	g.Recheck = time.Hour
	g.listening.Store(true)
	var woke bool
	look := func(wakeMeanwhile bool) error {
		keys := []string{"asynq:{q}:pending", "asynq:{q}:paused", "asynq:{q}:active", "asynq:{q}:lease"}
		cmd := redis.NewCmd(context.Background(), "eval", "return nil", len(keys), keys[0], keys[1], keys[2], keys[3])
		return g.ProcessHook(func(ctx context.Context, c redis.Cmder) error {
			if wakeMeanwhile {
				g.Wake("q")
				woke = true
			}
			return rdb.Process(ctx, c)
		})(context.Background(), cmd)
	}
	if err := look(true); err != redis.Nil {
		t.Fatalf("look: %v", err)
	}
	if !woke {
		t.Fatal("the look did not reach Redis")
	}
	_, real := g.Stats()
	if err := look(false); err != redis.Nil || g.real.Load() != real+1 {
		t.Fatal("after a wake during the look, the next look was answered locally")
	}
	if err := look(false); err != redis.Nil || g.real.Load() != real+1 {
		t.Fatal("a queue found empty with no wake since was looked at again")
	}
	if !g.Empty("q") {
		t.Fatal("a queue found empty is not known empty")
	}
	g.Wake("q")
	if g.Empty("q") {
		t.Fatal("a woken queue is still known empty")
	}
}

// Wakes published while the subscription was down are lost; the
// resubscription wakes every queue, so a push made meanwhile runs
// without waiting for the re-check (an hour here).
func TestResubscriptionWakesEveryQueue(t *testing.T) {
	r := redistest.New(t)
	ran := make(chan string, 1)
	w := startWorker(t, r, time.Hour, ran)
	waitGated(t, w, 1)
	plain := r.Client(t)
	// a push nobody announces, as if its wake went out while the
	// subscription was down
	if _, err := asynq.NewClientFromRedisClient(plain).Enqueue(asynq.NewTask("t", []byte("lost")), asynq.Queue("q")); err != nil {
		t.Fatal(err)
	}
	l, _ := w.gate.Stats()
	waitGated(t, w, l+50)
	select {
	case p := <-ran:
		t.Fatalf("ran %q before the resubscription", p)
	default:
	}
	if err := plain.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	waitRan(t, ran, "lost")
	if w.gate.resubscribed.Load() == 0 {
		t.Fatal("the task ran, but not through a resubscription")
	}
}

// prq's scheduled sets hold only held tasks, due years ahead: once a real
// forward found nothing due, the forwarder's looks at the scheduled set
// are answered locally until Recheck has passed; the retry set is
// forwarded as asynq does, so a retry still runs when due.
func TestScheduledForwardQuietUntilRecheck(t *testing.T) {
	r := redistest.New(t)
	ran := make(chan string, 2)
	w := startWorkerWith(t, r, time.Hour, ran, asynq.Config{DelayedTaskCheckInterval: 5 * time.Millisecond})
	deadline := time.Now().Add(30 * time.Second)
	for w.gate.quiet.Load() < 50 {
		if time.Now().After(deadline) {
			t.Fatal("the gate never answered a forward of the scheduled set")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := w.cnt.fwd.Load(); n != 1 {
		t.Fatalf("%d forwards of the scheduled set reached Redis, want the first only", n)
	}
	// a task in the retry set (a retry due now) is forwarded and runs
	other := r.Client(t)
	other.AddHook(New(other))
	if _, err := asynq.NewClientFromRedisClient(other).Enqueue(asynq.NewTask("t", []byte("soon")), asynq.Queue("q"), asynq.TaskID("soon"), asynq.ProcessIn(time.Hour)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pipe := other.TxPipeline()
	pipe.ZRem(ctx, "asynq:{q}:scheduled", "soon")
	pipe.ZAdd(ctx, "asynq:{q}:retry", redis.Z{Score: float64(time.Now().Unix() - 1), Member: "soon"})
	pipe.HSet(ctx, "asynq:{q}:t:soon", "state", "retry")
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	waitRan(t, ran, "soon")

	// with a short Recheck a scheduled task due now (a writer other than
	// prq) is found by the next real look
	r2 := redistest.New(t)
	w2 := startWorkerWith(t, r2, 50*time.Millisecond, ran, asynq.Config{DelayedTaskCheckInterval: 5 * time.Millisecond})
	for w2.gate.quiet.Load() < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := asynq.NewClientFromRedisClient(r2.Client(t)).Enqueue(asynq.NewTask("t", []byte("due")), asynq.Queue("q"), asynq.ProcessIn(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	waitRan(t, ran, "due")
}

// gated is a client whose commands pass a listening gate, with the
// queue "q" driven by scripts shaped as asynq's: push puts tasks on the
// pending list and answers their count, dequeue moves one to active.
type gated struct {
	t    *testing.T
	gate *Gate
	rdb  *redis.Client
}

func newGated(t *testing.T, r *redistest.Server) *gated {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := &gated{t: t, rdb: r.Client(t)}
	c.gate = New(c.rdb)
	c.gate.Recheck = time.Hour
	c.rdb.AddHook(c.gate)
	if err := c.gate.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *gated) push(ids ...string) {
	c.t.Helper()
	args := make([]interface{}, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	if err := c.rdb.Eval(context.Background(), "redis.call('LPUSH', KEYS[1], unpack(ARGV)) return #ARGV", []string{"asynq:{q}:pending"}, args...).Err(); err != nil {
		c.t.Fatal(err)
	}
}

// dequeue returns the task taken ("" if none) and whether the look
// reached Redis.
func (c *gated) dequeue() (id string, real bool) {
	c.t.Helper()
	_, before := c.gate.Stats()
	keys := []string{"asynq:{q}:pending", "asynq:{q}:paused", "asynq:{q}:active", "asynq:{q}:lease"}
	v, err := c.rdb.Eval(context.Background(), "local id = redis.call('RPOPLPUSH', KEYS[1], KEYS[3]) if id then return id end return nil", keys).Text()
	if err != nil && err != redis.Nil {
		c.t.Fatal(err)
	}
	_, after := c.gate.Stats()
	return v, after > before
}

// want checks one dequeue's outcome.
func (c *gated) want(id string, real bool) {
	c.t.Helper()
	if got, r := c.dequeue(); got != id || r != real {
		c.t.Fatalf("dequeue: got %q (real %v), want %q (real %v)", got, r, id, real)
	}
}

// waitWoken waits until the gate has taken a wake of queue q.
func (c *gated) waitWoken(q string) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.gate.mu.Lock()
		st := c.gate.queues[q]
		woken := st != nil && st.gen > 0
		c.gate.mu.Unlock()
		if woken {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no wake of %s arrived", q)
		}
		time.Sleep(time.Millisecond)
	}
}

// A process that pushed n tasks knows the queue empty again once it has
// dequeued n, with no look that finds nothing.
func TestOwnPushesNeedNoEmptyLook(t *testing.T) {
	c := newGated(t, redistest.New(t))
	c.want("", true) // never looked at: a real look
	c.want("", false)
	c.push("a", "b")
	c.want("a", true)
	if c.gate.Empty("q") {
		t.Fatal("known empty while b waits")
	}
	c.want("b", true)
	c.want("", false)
	if !c.gate.Empty("q") {
		t.Fatal("not known empty after both own pushes were dequeued")
	}
}

// Tasks that waited before the gate's first look are not its own: an own
// push counted on top of them does not close the queue early.
func TestTasksBeforeFirstLookKeepQueueOpen(t *testing.T) {
	c := newGated(t, redistest.New(t))
	if err := c.rdb.LPush(context.Background(), "asynq:{q}:pending", "old").Err(); err != nil {
		t.Fatal(err)
	}
	c.push("a")
	c.want("old", true)
	c.want("a", true)
	c.want("", true)
	c.want("", false)
}

// The same with asynq: the worker's own client enqueues; each task
// costs one real dequeue, and none finds the queue empty.
func TestOwnEnqueuesNeedNoEmptyLook(t *testing.T) {
	r := redistest.New(t)
	ran := make(chan string, 3)
	w := startWorker(t, r, time.Hour, ran)
	waitGated(t, w, 1)
	before := w.cnt.n.Load()
	client := asynq.NewClientFromRedisClient(w.rdb)
	for _, p := range []string{"1", "2", "3"} {
		if _, err := client.Enqueue(asynq.NewTask("t", []byte(p)), asynq.Queue("q")); err != nil {
			t.Fatal(err)
		}
		waitRan(t, ran, p)
	}
	l, _ := w.gate.Stats()
	waitGated(t, w, l+50)
	if n := w.cnt.n.Load() - before; n != 3 {
		t.Fatalf("%d dequeues reached Redis for 3 tasks, want 3", n)
	}
}

// A wake from elsewhere between an own push and its dequeue keeps the
// queue open: dequeues stay real until one finds nothing, so the other
// process's task is taken although the own credits ran out first.
func TestRemoteWakeKeepsQueueOpen(t *testing.T) {
	c := newGated(t, redistest.New(t))
	c.want("", true)
	c.push("mine")
	if err := c.rdb.LPush(context.Background(), "asynq:{q}:pending", "theirs").Err(); err != nil {
		t.Fatal(err)
	}
	c.gate.Wake("q") // its wake
	c.want("mine", true)
	c.want("theirs", true)
	c.want("", true)
	c.want("", false)
}

// A gate's own publish coming back through its subscription does not
// open the queue; a publish in the old format (queue names only, no
// gate id) wakes as before.
func TestOwnWakeComesBackIgnored(t *testing.T) {
	r := redistest.New(t)
	c := newGated(t, r)
	c.want("", true)
	c.push("a")
	// published after the own wake, so received after it
	if err := r.Client(t).Publish(context.Background(), Channel, "other").Err(); err != nil {
		t.Fatal(err)
	}
	c.waitWoken("other")
	c.want("a", true)
	c.want("", false)
	// an old-format wake of q opens it
	if err := r.Client(t).Publish(context.Background(), Channel, "q").Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for c.gate.Empty("q") {
		if time.Now().After(deadline) {
			t.Fatal("an old-format wake never arrived")
		}
		time.Sleep(time.Millisecond)
	}
	c.want("", true)
	c.want("", false)
}

// Two processes: the pusher's servers take one of its two tasks, the
// other process the second. The pusher never knows the queue empty while
// a task waits, and its next real look finds it empty.
func TestOtherProcessTakesOwnPush(t *testing.T) {
	r := redistest.New(t)
	p1, p2 := newGated(t, r), newGated(t, r)
	p1.want("", true)
	p2.want("", true)
	p1.push("a", "b")
	p2.waitWoken("q")
	p1.want("a", true)
	if p1.gate.Empty("q") {
		t.Fatal("the pusher knows the queue empty while b waits")
	}
	p2.want("b", true)
	p2.want("", true)
	p1.want("", true) // its credit outlived b: a look, as without credits
	p1.want("", false)
	p2.want("", false)
	if n, err := r.Client(t).LLen(context.Background(), "asynq:{q}:active").Result(); err != nil || n != 2 {
		t.Fatalf("active: %d (%v), want both tasks", n, err)
	}
}

// The wake's payload: the queues and the publishing gate's id. A process
// that splits on commas and wakes every element (prq before the id)
// wakes the queues and gains one state per publishing gate.
func TestWakePayload(t *testing.T) {
	for _, tc := range []struct {
		name, payload string
		queues        []string
		from          string
	}{
		{"old writer", "paid,chat", []string{"paid", "chat"}, ""},
		{"with id", "paid,chat,{0123abcd}", []string{"paid", "chat"}, "0123abcd"},
		{"one queue", "free,{x}", []string{"free"}, "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			qs, from := parseWake(tc.payload)
			if !slices.Equal(qs, tc.queues) || from != tc.from {
				t.Fatalf("parseWake(%q) = %q, %q; want %q, %q", tc.payload, qs, from, tc.queues, tc.from)
			}
		})
	}
	g1, g2 := New(nil), New(nil)
	if g1.id == g2.id || strings.ContainsAny(g1.id, ",{}") {
		t.Fatalf("gate ids %q and %q: want distinct, no comma or brace", g1.id, g2.id)
	}
	old := New(nil)
	for range 3 {
		for _, g := range []*Gate{g1, g2} {
			old.Wake(strings.Split("paid,chat,{"+g.id+"}", ",")...)
		}
	}
	if len(old.queues) != 4 || old.queues["paid"].gen != 6 || old.queues["chat"].gen != 6 {
		t.Fatalf("an old reader's states: %d, want paid, chat and one per gate", len(old.queues))
	}
}

// pushCount reads the count of tasks pushed from each script's reply.
func TestPushCount(t *testing.T) {
	release := []string{"asynq:{q}:pending", "asynq:{q}:scheduled", "asynq:{q}:retry", "asynq:{q}:archived", "asynq:{q}:completed", "asynq:{q}:t:a", "asynq:{q}:t:b", "asynq:{q}:t:c"}
	enqueue := []string{"asynq:{q}:t:a", "asynq:{q}:pending"}
	for _, tc := range []struct {
		name  string
		keys  []string
		reply interface{}
		want  int64
	}{
		{"enqueue", enqueue, int64(1), 1},
		{"enqueue refused", enqueue, int64(0), 0},
		{"unique refused", enqueue, int64(-1), 0},
		{"forward", []string{"asynq:{q}:scheduled", "asynq:{q}:pending"}, int64(7), 7},
		{"nil", enqueue, nil, 0},
		{"requeue OK", enqueue, "OK", -1},
		{"release", release, []interface{}{int64(1), int64(-2), int64(1)}, 2},
		{"release, none", release, []interface{}{int64(0), int64(-1), int64(-4)}, 0},
		{"release, short reply", release, []interface{}{int64(1)}, -1},
		{"array, not release", enqueue, []interface{}{int64(1)}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := redis.NewCmd(context.Background(), "evalsha", "x", len(tc.keys))
			cmd.SetVal(tc.reply)
			if got := pushCount(cmd, tc.keys); got != tc.want {
				t.Fatalf("pushCount = %d, want %d", got, tc.want)
			}
		})
	}
}

// A gate alone on the channel publishes its wakes at most once an
// AloneEvery (nobody else to wake); another process's wake ends that,
// and with two listening every push is published.
func TestAloneGatePublishesOnceASecond(t *testing.T) {
	r := redistest.New(t)
	p1 := newGated(t, r)
	admin := r.Client(t)
	publishes := func() int64 {
		for l := range strings.SplitSeq(admin.Info(context.Background(), "commandstats").Val(), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "cmdstat_publish:calls="); ok {
				n, _ := strconv.ParseInt(strings.SplitN(v, ",", 2)[0], 10, 64)
				return n
			}
		}
		return 0
	}
	p1.want("", true) // never looked at: a real look
	p1.push("a")
	if n := publishes(); n != 1 {
		t.Fatalf("the first push: %d PUBLISH, want 1", n)
	}
	p1.push("b")
	if n := publishes(); n != 1 {
		t.Fatalf("alone, a second push within a second: %d PUBLISH in all, want 1", n)
	}
	p1.want("a", true)
	p1.want("b", true)
	p1.want("", false) // its own pushes, counted: no wake needed to know
	p2 := newGated(t, r)
	p2.push("c") // reaches p1 (p2's first publish)
	p1.waitWoken("q")
	for p1.gate.alone.Load() { // the wake is heard just after the gen moves
		time.Sleep(time.Millisecond)
	}
	before := publishes()
	p1.push("d")
	p1.push("e")
	if n := publishes() - before; n != 2 {
		t.Fatalf("with another process listening: %d PUBLISH for 2 pushes, want 2", n)
	}
}
