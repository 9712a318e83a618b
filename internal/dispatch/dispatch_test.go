package dispatch

import (
	"context"
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
