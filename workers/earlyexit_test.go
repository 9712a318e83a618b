package workers_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// TestFileWorkerEarlyExitsRefund: every way a file job ends before its
// call gives its whole admission reservation back, once — the bucket is
// never left charged until the reservation expires (#47).
func TestFileWorkerEarlyExitsRefund(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		number int64
		// worker builds the worker for the job; exit says whether
		// ProcessTask's error is the exit expected
		worker func(*testing.T, *storeAndAdm) *workers.FileWorker
		exit   func(error) bool
		// skipped is the start of the result recorded, if one is
		skipped string
	}{
		{name: "superseded while starting", number: 471,
			worker: func(t *testing.T, s *storeAndAdm) *workers.FileWorker {
				return s.worker(t, pushedBetween{s.st, t, true, &sync.Once{}}, testModels)
			},
			exit: func(err error) bool { return errors.Is(err, asynq.RevokeTask) }},
		{name: "model not configured", number: 472,
			worker: func(t *testing.T, s *storeAndAdm) *workers.FileWorker {
				return s.worker(t, s.st, map[string]workers.Model{"gpt-4o": {Model: llmcall.Model{Name: "gpt-4o"}}})
			},
			exit: func(err error) bool { return err == nil }, skipped: "model gpt-4o-mini is not configured"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := &storeAndAdm{st: newStore(t), adm: &fakeAdmission{}, model: &fakeLLM{CompleteFunc: answer("never")}}
			pr := testPR(t, tc.number)
			f, task := plannedFile(t, s.st, pr, jobs.KindSummary)
			if err := tc.worker(t, s).ProcessTask(ctx, task); !tc.exit(err) {
				t.Fatalf("ProcessTask = %v, not the exit expected", err)
			}
			if s.model.Calls() != 0 {
				t.Errorf("%d LLM calls, want none", s.model.Calls())
			}
			if got := s.adm.Events("settle"); len(got) != 1 || got[0] != "settle "+jobs.FileTaskID(f)+" 0" {
				t.Errorf("settled %q, want the reservation refunded once", got)
			}
			if tc.skipped == "" {
				return
			}
			results, err := s.st.Results(ctx, pr, "h1")
			if err != nil || len(results) != 1 || !strings.HasPrefix(results[0].Skipped, tc.skipped) {
				t.Errorf("results %+v (%v), want one skipped %q", results, err, tc.skipped)
			}
		})
	}
}

// TestFileWorkerRecordedResultRefunds: a retry of a job whose result was
// recorded makes no second call and refunds what it was admitted with.
func TestFileWorkerRecordedResultRefunds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := &storeAndAdm{st: newStore(t), adm: &fakeAdmission{}, model: &fakeLLM{CompleteFunc: answer("Adds b.")}}
	pr := testPR(t, 473)
	f, task := plannedFile(t, s.st, pr, jobs.KindSummary)
	w := s.worker(t, s.st, testModels)
	for i := range 2 {
		if err := w.ProcessTask(ctx, task); err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
	}
	if s.model.Calls() != 1 {
		t.Errorf("%d LLM calls, want the first run's only", s.model.Calls())
	}
	got := s.adm.Events("settle")
	if len(got) != 2 || got[1] != "settle "+jobs.FileTaskID(f)+" 0" {
		t.Errorf("settled %q, want the call's use, then the retry refunded", got)
	}
}

// storeAndAdm is a file job's store, admission and model.
type storeAndAdm struct {
	st    *store.Store
	adm   *fakeAdmission
	model *fakeLLM
}

func (s *storeAndAdm) worker(t *testing.T, st workers.FileStore, models map[string]workers.Model) *workers.FileWorker {
	t.Helper()
	w, err := workers.NewFileWorker(workers.FileWorkerConfig{Attempts: newAttempts(t), Store: st, Ledger: s.adm,
		Caller: newCaller(t, s.adm, s.model, nil, nil), Queue: &fakeQueue{}, Models: models, Repairs: s.st, Requeue: s.adm})
	if err != nil {
		t.Fatal(err)
	}
	return w
}
