package admission_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
)

// TestReleaseOfPendingTaskIsQuiet: releasing a task that is pending
// already (a second process's release, the reconciler's) is fine and
// says nothing; a task that is gone loses its ticket.
func TestReleaseOfPendingTaskIsQuiet(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	model := fmt.Sprintf("rel-%d", time.Now().UnixNano())
	b, err := ratelimit.NewBucket(rdb, model, "sk", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 100000, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	insp := asynq.NewInspectorFromRedisClient(rdb)
	s, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: b}, asynq.NewClientFromRedisClient(rdb), insp, admission.Config{},
		slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		t.Fatal(err)
	}
	queue := "q-" + model
	for _, id := range []string{model + "-a", model + "-gone"} {
		tk := admission.Ticket{ID: id, Queue: queue, Model: model, Class: "paid", Tenant: "1", Tokens: 10}
		if ok, err := s.Submit(ctx, asynq.NewTask("file:review", nil), tk); !ok || err != nil {
			t.Fatalf("submit %s: %v %v", id, ok, err)
		}
	}
	if err := insp.DeleteTask(queue, model+"-gone"); err != nil {
		t.Fatal(err)
	}
	adm, _, err := s.Admit(ctx, model, 10)
	if err != nil || len(adm) != 2 {
		t.Fatalf("admit: %+v %v", adm, err)
	}
	s.Release(ctx, adm)
	s.Release(ctx, adm[:1]) // pending already
	if info, err := insp.GetTaskInfo(queue, model+"-a"); err != nil || info.State != asynq.TaskStatePending {
		t.Fatalf("task after release: %v %v", info, err)
	}
	if strings.Contains(logs.String(), "release failed") {
		t.Fatalf("a second release of a pending task warned:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "admitted task is gone") {
		t.Fatalf("the deleted task was not reported gone:\n%s", logs.String())
	}
	st, err := s.Stats(ctx, model)
	if err != nil || st.Released != 1 {
		t.Fatalf("released and not started: %d (%v), want 1: the gone task's ticket is dropped", st.Released, err)
	}
}

// TestReleaseWhileItsPreviousRunIsActive: a handler that puts its job
// back into admission (a 429, a review's repair call) registers the ticket
// and returns; admission can admit the ticket before asynq has moved the
// task out of active, when RunTask refuses it. The task must still run
// again as soon as it is held, not after the reconciler's release timeout
// (ten minutes here, so without the follow-up the second run never comes).
func TestReleaseWhileItsPreviousRunIsActive(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	model := fmt.Sprintf("again-%d", time.Now().UnixNano())
	b, err := ratelimit.NewBucket(rdb, model, "sk", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 100000, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	s, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: b}, asynq.NewClientFromRedisClient(rdb), insp,
		admission.Config{ReleaseTimeout: 10 * time.Minute}, discard)
	if err != nil {
		t.Fatal(err)
	}
	queue := "q-" + model
	tk := admission.Ticket{ID: model + "-job", Queue: queue, Model: model, Class: "paid", Tenant: "1", Tokens: 10}
	if ok, err := s.Submit(ctx, asynq.NewTask("file:review", nil), tk); !ok || err != nil {
		t.Fatalf("submit: %v %v", ok, err)
	}
	adm, _, err := s.Admit(ctx, model, 1)
	if err != nil || len(adm) != 1 {
		t.Fatalf("admit: %+v %v", adm, err)
	}
	s.Release(ctx, adm)

	errAgain := fmt.Errorf("back to admission")
	registered, readmitted, second := make(chan struct{}), make(chan struct{}), make(chan struct{})
	runs := 0
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: 1, Queues: map[string]int{queue: 1}, TaskCheckInterval: 10 * time.Millisecond,
		LogLevel: asynq.FatalLevel, IsFailure: func(error) bool { return false },
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return jobs.Hold }})
	err = srv.Start(asynq.HandlerFunc(func(hctx context.Context, _ *asynq.Task) error {
		runs++
		if runs > 1 {
			close(second)
			return nil
		}
		if err := s.Started(hctx, model, tk.ID); err != nil {
			t.Error(err)
		}
		if _, err := s.Register(hctx, tk); err != nil {
			t.Error(err)
		}
		close(registered)
		<-readmitted // admission took the ticket while this run is active
		return errAgain
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	<-registered
	adm, _, err = s.Admit(ctx, model, 1)
	if err != nil || len(adm) != 1 {
		t.Fatalf("re-admit: %+v %v", adm, err)
	}
	s.Release(ctx, adm) // refused: the task is active
	close(readmitted)
	select {
	case <-second:
	case <-time.After(15 * time.Second):
		info, _ := insp.GetTaskInfo(queue, tk.ID)
		t.Fatalf("the task did not run again once held (state %v); it waits for the reconciler", info.State)
	}
}

// TestReleaseOfSeveralQueues: one admission's tasks of several queues
// all go pending (one script a queue), each under its own queue.
func TestReleaseOfSeveralQueues(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	model := fmt.Sprintf("relq-%d", time.Now().UnixNano())
	b, err := ratelimit.NewBucket(rdb, model, "sk", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 100000, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	s, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: b}, asynq.NewClientFromRedisClient(rdb), insp, admission.Config{}, discard)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i, q := range []string{"a", "a", "b", "a", "b"} {
		id, queue := fmt.Sprintf("%s-%d", model, i), "q-"+q+"-"+model
		want[id] = queue
		tk := admission.Ticket{ID: id, Queue: queue, Model: model, Class: "paid", Tenant: "1", Tokens: 10}
		if ok, err := s.Submit(ctx, asynq.NewTask("file:review", nil), tk); !ok || err != nil {
			t.Fatalf("submit %s: %v %v", id, ok, err)
		}
	}
	adm, _, err := s.Admit(ctx, model, 10)
	if err != nil || len(adm) != len(want) {
		t.Fatalf("admit: %+v %v", adm, err)
	}
	s.Release(ctx, adm)
	for id, queue := range want {
		if info, err := insp.GetTaskInfo(queue, id); err != nil || info.State != asynq.TaskStatePending {
			t.Errorf("%s after release: %+v %v, want pending in %s", id, info, err, queue)
		}
	}
	for _, q := range []string{"a", "b"} {
		if qi, err := insp.GetQueueInfo("q-" + q + "-" + model); err != nil || qi.Scheduled != 0 {
			t.Errorf("queue %s after release: %+v %v, want nothing scheduled", q, qi, err)
		}
	}
}
