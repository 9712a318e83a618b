package admission_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// TestDeadProcessJobsGoBackAtOnce: a worker process runs a held job and
// stops beating (its asynq server still shows the job active, its lease
// still valid). Another process's pass puts the job back through
// admission at once: it is held again, admitted, released and runs a
// second time while the first run has not returned and long before
// asynq's lease would end. A job in a process that still beats stays.
// A process that died before recording the job's start in admission
// leaves the ticket released: the job is released again at once.
func TestDeadProcessJobsGoBackAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		started bool
	}{{"died while running", true}, {"died before recording its start", false}} {
		// one after the other: every process shares the liveness record
		t.Run(tc.name, func(t *testing.T) { testDeadProcess(t, tc.started) })
	}
}

func testDeadProcess(t *testing.T, recordsStart bool) {
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	model := fmt.Sprintf("dead-%d", time.Now().UnixNano())
	queue := "q-" + model
	b, err := ratelimit.NewBucket(rdb, model, "sk", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 100000, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	clock := func() time.Time { return now }
	insp := asynq.NewInspectorFromRedisClient(rdb)
	s, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: b}, asynq.NewClientFromRedisClient(rdb), insp, admission.Config{NowFunc: clock}, discard)
	if err != nil {
		t.Fatal(err)
	}
	ticket := func(id string) admission.Ticket {
		return admission.Ticket{ID: id, Queue: queue, Model: model, Class: "paid", Tenant: "1", Tokens: 10}
	}
	rc := admission.RunConfig{TicketOf: func(ti *asynq.TaskInfo) (admission.Ticket, bool) { return ticket(ti.ID), true }}
	admitAll := func(want int) {
		t.Helper()
		adm, _, err := s.Admit(ctx, model, 10)
		if err != nil || len(adm) != want {
			t.Fatalf("admit: %+v %v, want %d", adm, err, want)
		}
		s.Release(ctx, adm)
	}

	// two worker processes, each with one slot: a job that does not end
	// until the test says
	type run struct {
		process, id string
	}
	runs := make(chan run, 4)
	release := make(chan struct{})
	start := func(name string) (*admission.Process, *asynq.Server) {
		p := s.Process(model + "-" + name)
		if err := p.Beat(ctx); err != nil {
			t.Fatal(err)
		}
		srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: 1, Queues: map[string]int{queue: 1},
			TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.FatalLevel})
		err := srv.Start(p.Track(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			if recordsStart || name == "live" { // as the workers do
				if err := s.Started(ctx, model, id); err != nil {
					return err
				}
			}
			runs <- run{name, id}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})))
		if err != nil {
			t.Fatal(err)
		}
		return p, srv
	}
	next := func() run {
		t.Helper()
		select {
		case r := <-runs:
			return r
		case <-time.After(2 * time.Minute): // a hang, not a speed figure
			t.Fatal("no job ran")
			return run{}
		}
	}
	if _, err := s.Submit(ctx, asynq.NewTask("file:review", nil), ticket(model+"-job")); err != nil {
		t.Fatal(err)
	}
	admitAll(1)
	_, dead := start("dead")
	if r := next(); r != (run{"dead", model + "-job"}) {
		t.Fatalf("first run %+v", r)
	}
	dead.Stop() // takes no more work; its job stays active, its lease valid

	// the dead process has been silent for 6s; the live one beats now
	now = now.Add(6 * time.Second)
	live, liveSrv := start("live")
	defer func() {
		close(release)
		liveSrv.Shutdown()
		dead.Shutdown()
		if err := live.Leave(ctx); err != nil {
			t.Error(err)
		}
	}()
	n, err := s.RecoverDead(ctx, rc, 5*time.Second)
	if err != nil || n != 1 {
		t.Fatalf("recover: %d %v, want 1 job put back", n, err)
	}
	if recordsStart {
		if info, err := insp.GetTaskInfo(queue, model+"-job"); err != nil || info.State != asynq.TaskStateRetry || info.NextProcessAt.Before(now.Add(time.Hour)) {
			t.Fatalf("after recovery: %+v %v, want held", info, err)
		}
		admitAll(1)
	}
	if r := next(); r != (run{"live", model + "-job"}) {
		t.Fatalf("second run %+v, want the job again in the live process", r)
	}
	// the live process's job, stalled or not, is its own: a pass that
	// finds nobody silent moves nothing
	if err := live.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.RecoverDead(ctx, rc, 5*time.Second); err != nil || n != 0 {
		t.Fatalf("second pass: %d %v, want nothing put back", n, err)
	}
	if info, err := insp.GetTaskInfo(queue, model+"-job"); err != nil || info.State != asynq.TaskStateActive {
		t.Fatalf("the live process's job: %+v %v, want still active", info, err)
	}
}

// A held task whose ticket waits to be registered (RegisterAt: a
// backoff, a spent quota's reset) is no orphan: a reconciler's scan
// leaves it delayed instead of putting it back in line at once.
func TestReconcileLeavesDelayedTickets(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	model := fmt.Sprintf("delayed-%d", time.Now().UnixNano())
	queue := "q-" + model
	b, err := ratelimit.NewBucket(rdb, model, "sk", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 100000, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: b}, asynq.NewClientFromRedisClient(rdb), asynq.NewInspectorFromRedisClient(rdb), admission.Config{}, discard)
	if err != nil {
		t.Fatal(err)
	}
	tickets := map[string]admission.Ticket{}
	for _, name := range []string{"quota", "backoff"} {
		tk := admission.Ticket{ID: name + "-" + model, Queue: queue, Model: model, Class: "paid", Tenant: "1", Tokens: 10}
		tickets[tk.ID] = tk
		if ok, err := s.Submit(ctx, asynq.NewTask("t", nil), tk); err != nil || !ok {
			t.Fatalf("submit: %v %v", ok, err)
		}
		if _, err := s.Cancel(ctx, model, tk.ID); err != nil {
			t.Fatal(err)
		}
	}
	// one found the quota spent: back to admission in an hour; the other
	// failed and backs off 2 s
	if err := s.RegisterAt(ctx, tickets["quota-"+model], time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterAt(ctx, tickets["backoff-"+model], time.Now().Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	rc := admission.RunConfig{Queues: []string{queue}, TicketOf: func(ti *asynq.TaskInfo) (admission.Ticket, bool) { return tickets[ti.ID], true }}
	if err := s.Reconcile(ctx, rc, true); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(ctx, model)
	if err != nil {
		t.Fatal(err)
	}
	if st.Backlog["paid"] != 0 {
		t.Fatalf("backlog %v after the scan, want both delayed tickets left to their time", st.Backlog)
	}
}

// A held task without a ticket whose job moved to a fallback model
// (RunConfig.Moved) is registered again under that model, with the
// estimate it moved with; one that waits there already is left alone.
func TestReconcileRegistersMovedJobsUnderTheirFallback(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	n := time.Now().UnixNano()
	primary, backup := fmt.Sprintf("primary-%d", n), fmt.Sprintf("backup-%d", n)
	queue := "q-" + primary
	buckets := map[string]*ratelimit.Bucket{}
	for _, m := range []string{primary, backup} {
		b, err := ratelimit.NewBucket(rdb, m, "sk", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 100000, Period: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		buckets[m] = b
	}
	s, err := admission.New(rdb, buckets, asynq.NewClientFromRedisClient(rdb), asynq.NewInspectorFromRedisClient(rdb), admission.Config{}, discard)
	if err != nil {
		t.Fatal(err)
	}
	tickets := map[string]admission.Ticket{}
	for _, name := range []string{"orphan", "waits", "stays"} {
		tk := admission.Ticket{ID: name + "-" + primary, Queue: queue, Model: primary, Class: "paid", Tenant: "1", Tokens: 10}
		tickets[tk.ID] = tk
		if ok, err := s.Submit(ctx, asynq.NewTask("t", nil), tk); err != nil || !ok {
			t.Fatalf("submit: %v %v", ok, err)
		}
	}
	// orphan and waits moved to the backup; waits was registered there,
	// orphan's process died first. stays never moved.
	for _, id := range []string{"orphan-" + primary, "waits-" + primary} {
		if ok, err := s.Take(ctx, primary, id); err != nil || !ok {
			t.Fatalf("take %s: %v %v", id, ok, err)
		}
	}
	moved := func(tk admission.Ticket) admission.Ticket {
		tk.Model, tk.Tokens = backup, 70
		return tk
	}
	if ok, err := s.Register(ctx, moved(tickets["waits-"+primary])); err != nil || !ok {
		t.Fatalf("register under the backup: %v %v", ok, err)
	}
	asked := 0
	rc := admission.RunConfig{Queues: []string{queue}, TicketOf: func(ti *asynq.TaskInfo) (admission.Ticket, bool) { return tickets[ti.ID], true },
		Moved: func(_ context.Context, tk admission.Ticket) admission.Ticket {
			asked++
			if strings.HasPrefix(tk.ID, "stays-") {
				return tk
			}
			return moved(tk)
		}}
	if err := s.Reconcile(ctx, rc, true); err != nil {
		t.Fatal(err)
	}
	p, _ := s.Stats(ctx, primary)
	b, _ := s.Stats(ctx, backup)
	if p.Backlog["paid"] != 1 || b.Backlog["paid"] != 2 || b.InTokens["paid"] != 140 {
		t.Fatalf("backlog primary %v, backup %v (%v tokens): want stays under the primary, orphan and waits under the backup at 70 tokens each", p.Backlog, b.Backlog, b.InTokens)
	}
	if asked != 2 {
		t.Fatalf("Moved asked %d times, want once per task without a ticket under its payload's model", asked)
	}
	w, _ := s.Waiting(ctx, backup, 0, 10)
	if len(w) != 2 {
		t.Fatalf("waiting under the backup: %+v", w)
	}
}

// A held task without a ticket whose model is paused is adopted only
// when a later pass finds it orphaned still: the fallback mover takes a
// paused model's tickets and registers them elsewhere a moment later,
// and a pass between the two must not register the job twice.
func TestReconcileWaitsAPassForPausedOrphans(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	model := fmt.Sprintf("paused-orphan-%d", time.Now().UnixNano())
	queue := "q-" + model
	b, err := ratelimit.NewBucket(rdb, model, "sk", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 100000, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: b}, asynq.NewClientFromRedisClient(rdb), asynq.NewInspectorFromRedisClient(rdb), admission.Config{}, discard)
	if err != nil {
		t.Fatal(err)
	}
	tk := admission.Ticket{ID: "orphan-" + model, Queue: queue, Model: model, Class: "paid", Tenant: "1", Tokens: 10}
	if ok, err := s.Submit(ctx, asynq.NewTask("t", nil), tk); err != nil || !ok {
		t.Fatalf("submit: %v %v", ok, err)
	}
	if ok, err := s.Take(ctx, model, tk.ID); err != nil || !ok {
		t.Fatalf("take: %v %v", ok, err)
	}
	if err := s.Pause(ctx, model, "401 invalid_api_key", time.Minute); err != nil {
		t.Fatal(err)
	}
	rc := admission.RunConfig{Queues: []string{queue}, TicketOf: func(*asynq.TaskInfo) (admission.Ticket, bool) { return tk, true }}
	backlog := func() int64 {
		st, _ := s.Stats(ctx, model)
		return st.Backlog["paid"]
	}
	if err := s.Reconcile(ctx, rc, true); err != nil || backlog() != 0 {
		t.Fatalf("first pass: backlog %d (%v), want the orphan left for a pass", backlog(), err)
	}
	if err := s.Reconcile(ctx, rc, true); err != nil || backlog() != 1 {
		t.Fatalf("second pass: backlog %d (%v), want the orphan adopted", backlog(), err)
	}
}

// TestJobsRecordRenewedByBeat: Track names a running job in the
// process's record with one write; the record's TTL is the beat's to
// renew, so a record nothing recovers still goes.
func TestJobsRecordRenewedByBeat(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	b, err := ratelimit.NewBucket(rdb, "jobs-ttl", "sk", ratelimit.Limits{RequestsPerPeriod: 10, TokensPerPeriod: 1000, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s, err := admission.New(rdb, map[string]*ratelimit.Bucket{"jobs-ttl": b}, nil, nil, admission.Config{}, discard)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("jobs-ttl-%d", time.Now().UnixNano())
	key := "prq:proc:{" + name + "}:jobs"
	p := s.Process(name)
	defer p.Leave(ctx)
	var during []any
	h := p.Track(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		q, _ := rdb.HGet(ctx, key, "job-1").Result()
		rdb.Persist(ctx, key) // whatever TTL it had: the beat's must be there after it
		if err := p.Beat(ctx); err != nil {
			return err
		}
		during = []any{q, rdb.TTL(ctx, key).Val()}
		return nil
	}))
	// asynq's task id and queue reach the handler through its context:
	// a real server runs it
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: 1, Queues: map[string]int{"q-" + name: 1},
		TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.FatalLevel})
	done := make(chan struct{})
	if err := srv.Start(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		defer close(done)
		return h.ProcessTask(ctx, task)
	})); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	if _, err := asynq.NewClientFromRedisClient(rdb).Enqueue(asynq.NewTask("x", nil), asynq.TaskID("job-1"), asynq.Queue("q-"+name)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute): // a hang, not a speed figure
		t.Fatal("the job did not run")
	}
	if len(during) != 2 || during[0] != "q-"+name {
		t.Fatalf("while running: %v, want the job recorded under its queue", during)
	}
	if ttl := during[1].(time.Duration); ttl <= 23*time.Hour || ttl > 24*time.Hour {
		t.Fatalf("after a beat: the record's TTL is %s, want 24h", ttl)
	}
	// the finished job leaves the record at the next beat
	if err := p.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("after the job and a beat: the record exists (%d), want it gone with its last job", n)
	}
}

// TestJobsRecordTTLOncePerRecord: of the jobs a process runs at once,
// only the one that creates its record sends the record's TTL; the
// others' write is the HSET alone, and the record keeps its TTL.
func TestJobsRecordTTLOncePerRecord(t *testing.T) {
	t.Parallel()
	srvRedis := redistest.Shared(t)
	rdb := srvRedis.Client(t)
	counted := srvRedis.Client(t)
	expires := &commandCount{name: "expire"}
	counted.AddHook(expires)
	ctx := context.Background()
	b, err := ratelimit.NewBucket(rdb, "jobs-ttl-once", "sk", ratelimit.Limits{RequestsPerPeriod: 10, TokensPerPeriod: 1000, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s, err := admission.New(counted, map[string]*ratelimit.Bucket{"jobs-ttl-once": b}, nil, nil, admission.Config{}, discard)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("jobs-ttl-once-%d", time.Now().UnixNano())
	key := "prq:proc:{" + name + "}:jobs"
	p := s.Process(name)
	defer p.Leave(ctx)
	started, release := make(chan string, 2), make(chan struct{})
	h := p.Track(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		started <- id
		<-release
		return nil
	}))
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: 2, Queues: map[string]int{"q-" + name: 1},
		TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.FatalLevel})
	if err := srv.Start(h); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	client := asynq.NewClientFromRedisClient(rdb)
	for _, id := range []string{"job-1", "job-2"} {
		if _, err := client.Enqueue(asynq.NewTask("x", nil), asynq.TaskID(id), asynq.Queue("q-"+name)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		select {
		case <-started:
		case <-time.After(2 * time.Minute): // a hang, not a speed figure
			t.Fatal("the jobs did not both start")
		}
	}
	n, ttl := rdb.HLen(ctx, key).Val(), rdb.TTL(ctx, key).Val()
	close(release)
	if n != 2 || ttl <= 23*time.Hour {
		t.Fatalf("two jobs running: the record holds %d with TTL %s, want both and 24h", n, ttl)
	}
	if got := expires.get(); got != 1 {
		t.Errorf("two jobs running at once sent %d EXPIRE, want 1 (the record's creator's)", got)
	}
}

// commandCount counts the commands of one name a client sends.
type commandCount struct {
	name string
	mu   sync.Mutex
	n    int
}

func (c *commandCount) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

func (c *commandCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.add(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *commandCount) add(cmd redis.Cmder) {
	if cmd.Name() == c.name {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
}

func (c *commandCount) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
