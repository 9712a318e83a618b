package workers_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// plannedFile records a run of one file at head h1 and returns its job.
func plannedFile(t *testing.T, st *store.Store, pr jobs.PR, kind jobs.Kind) (jobs.File, *asynq.Task) {
	t.Helper()
	run := store.Run{PR: pr, Head: "h1", Tier: jobs.TierPaid, SummaryTotal: 1}
	model := "gpt-4o-mini"
	if kind == jobs.KindReview {
		run.SummaryTotal, run.ReviewTotal, model = 0, 1, "gpt-4o"
	}
	if _, _, err := st.StartRun(context.Background(), run, []store.FileData{{Path: "a.go", Status: "modified", Additions: 1, Patch: patchA}}); err != nil {
		t.Fatal(err)
	}
	f := jobs.File{PR: pr, HeadSHA: "h1", Kind: kind, Tier: jobs.TierPaid, Path: "a.go", Total: 1, Estimate: 500, Model: model}
	payload := jobs.Marshal(struct {
		jobs.File
		FileIndex int `json:"file_index"`
	}{File: f, FileIndex: 0})
	typ := jobs.TypeSummary
	if kind == jobs.KindReview {
		typ = jobs.TypeReview
	}
	return f, asynq.NewTask(typ, payload)
}

func newFileWorker(t *testing.T, st *store.Store, adm *fakeAdmission, c *workers.Caller, q *fakeQueue, log *slog.Logger) *workers.FileWorker {
	t.Helper()
	w, err := workers.NewFileWorker(workers.FileWorkerConfig{Attempts: newAttempts(t), Store: st, Ledger: adm, Caller: c, Queue: q, Models: testModels, Repairs: st, Requeue: adm, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestFileWorkerCallingBeforeCall: the job tells admission right before
// its call (a window limiter moves its charge from the job's start to
// the call), once, after its start.
func TestFileWorkerCallingBeforeCall(t *testing.T) {
	t.Parallel()
	st, adm, q := newStore(t), &fakeAdmission{}, &fakeQueue{}
	var before []string
	model := &fakeLLM{CompleteFunc: func(r llm.Request) (llm.Response, error) {
		before = adm.Events("")
		return answer("Adds b.")(r)
	}}
	pr := testPR(t, 209)
	f, task := plannedFile(t, st, pr, jobs.KindSummary)
	w := newFileWorker(t, st, adm, newCaller(t, adm, model, nil, nil), q, nil)
	if err := w.ProcessTask(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	id := jobs.FileTaskID(f)
	if n := len(before); n < 2 || before[0] != "started "+id || before[n-1] != "calling "+id {
		t.Fatalf("admission heard %q before the call; want the start first and calling last", before)
	}
	if got := adm.Events("calling"); len(got) != 1 {
		t.Fatalf("calling %q, want once", got)
	}
}

// TestFileWorkerCallingFailedHoldsDefaultMargin: when the job's charge
// cannot be moved to its call (Redis failed), it stays at the start, and
// a margin measured from the write would not cover the way from there:
// the process holds the default margin for two windows.
func TestFileWorkerCallingFailedHoldsDefaultMargin(t *testing.T) {
	t.Parallel()
	b, err := ratelimit.NewBucket(redistest.Shared(t).Client(t), "m-margin-"+t.Name(), "sk-margin",
		ratelimit.Limits{RequestsPerPeriod: 100, TokensPerPeriod: 100000, Period: time.Minute, Limiter: ratelimit.LimiterWindow})
	if err != nil {
		t.Fatal(err)
	}
	b.ObserveWay(time.Millisecond)
	if m := b.WindowMargin(); m != 5*time.Millisecond {
		t.Fatalf("measured margin %s, want 5ms", m)
	}
	st, adm, q := newStore(t), &fakeAdmission{CallingErr: errors.New("redis: connection refused"), bucket: b}, &fakeQueue{}
	pr := testPR(t, 211)
	_, task := plannedFile(t, st, pr, jobs.KindSummary)
	w := newFileWorker(t, st, adm, newCaller(t, adm, &fakeLLM{CompleteFunc: answer("Adds b.")}, nil, nil), q, nil)
	if err := w.ProcessTask(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	if m := b.WindowMargin(); m != time.Minute/60 {
		t.Fatalf("margin %s after a call whose charge stayed at its start, want the default %s", m, time.Minute/60)
	}
}

func TestFileWorker(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		inst int64
		kind jobs.Kind
		llm  func(llm.Request) (llm.Response, error)
		// quota, when set, is the paid tier's token quota (real, on Redis).
		quota int64
		// back: the job went back to admission (no result yet).
		back         bool
		wantText     string
		wantSkipped  string
		wantComments int
		wantSettle   string
		// wantRefund: no call was made, the reservation is settled to zero
		wantRefund bool
		wantPause  bool
	}{
		{name: "summary recorded; last file triggers finalize", inst: 201, kind: jobs.KindSummary, llm: answer("Adds b."),
			wantText: "Adds b.", wantSettle: "settle summary-", wantSkipped: ""},
		{name: "review comments kept on diff lines", inst: 202, kind: jobs.KindReview,
			llm:      answer(`{"summary":"b lacks a check","comments":[{"line":2,"body":"check b"}]}`),
			wantText: "b lacks a check", wantComments: 1, wantSettle: "settle review-"},
		{name: "provider 429: back to admission", inst: 203, kind: jobs.KindSummary, llm: fail(llm.ErrRateLimited), back: true},
		{name: "account problem: model paused, back to admission", inst: 204, kind: jobs.KindSummary, llm: fail(llm.ErrAccount), back: true, wantPause: true},
		{name: "transient failure with no retry left: recorded as failed", inst: 205, kind: jobs.KindSummary, llm: fail(llm.ErrTransient),
			wantSkipped: "the model provider failed 1 times (ref "},
		{name: "permanent failure: recorded as failed", inst: 206, kind: jobs.KindSummary, llm: fail(llm.ErrPermanent),
			wantSkipped: "the model provider refused the request (ref "},
		{name: "too large for the model", inst: 207, kind: jobs.KindSummary, llm: fail(llm.ErrContextLength),
			wantSkipped: "too large for gpt-4o-mini"},
		{name: "quota refused (when_spent: skip): skipped without a call, reservation refunded", inst: 208, kind: jobs.KindSummary, llm: answer("never"), quota: 10,
			wantSkipped: "skipped: quota reached", wantSettle: "settle summary-", wantRefund: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st, adm, q, model := newStore(t), &fakeAdmission{}, &fakeQueue{}, &fakeLLM{CompleteFunc: tc.llm}
			var quota workers.Quota
			tiers := map[jobs.Tier]workers.TierSpec{}
			if tc.quota > 0 {
				qu, err := ratelimit.NewQuota(redistest.Shared(t).Client(t), ratelimit.QuotaConfig{})
				if err != nil {
					t.Fatal(err)
				}
				quota, tiers[jobs.TierPaid] = qu, workers.TierSpec{QuotaTokens: tc.quota}
			}
			pr := testPR(t, tc.inst)
			f, task := plannedFile(t, st, pr, tc.kind)
			caller, err := workers.NewCaller(workers.CallerConfig{LLM: model, Ledger: adm, Requeue: adm, Provider: adm, Quota: quota, Tiers: tiers, QuotaSkip: true})
			if err != nil {
				t.Fatal(err)
			}
			w := newFileWorker(t, st, adm, caller, q, nil)
			err = w.ProcessTask(ctx, task)
			id := jobs.FileTaskID(f)
			if started := adm.Events("started"); len(started) != 1 || started[0] != "started "+id {
				t.Errorf("started %q, want the job's ticket", started)
			}
			results, rerr := st.Results(ctx, pr, "h1")
			if rerr != nil {
				t.Fatal(rerr)
			}
			if tc.back {
				if err == nil || workers.IsFailure(err) {
					t.Fatalf("ProcessTask = %v, want back to admission (not a failure)", err)
				}
				if got := adm.Events("register"); len(got) != 1 || got[0] != "register "+id {
					t.Errorf("registered %q, want the job's ticket once", got)
				}
				if len(results) != 0 || len(q.Tasks()) != 0 {
					t.Errorf("results %v, finalize %v: want none until the job runs again", results, q.Tasks())
				}
				if got := len(adm.Events("pause")) == 1; got != tc.wantPause {
					t.Errorf("paused: %v, want %v", got, tc.wantPause)
				}
				return
			}
			if err != nil {
				t.Fatalf("ProcessTask: %v", err)
			}
			if len(results) != 1 {
				t.Fatalf("results %+v, want one", results)
			}
			r := results[0]
			if r.Text != tc.wantText || !strings.HasPrefix(r.Skipped, tc.wantSkipped) || (tc.wantSkipped == "") != (r.Skipped == "") || len(r.Comments) != tc.wantComments {
				t.Errorf("result %+v, want text %q, skipped %q…, %d comments", r, tc.wantText, tc.wantSkipped, tc.wantComments)
			}
			if got := q.Tasks(); len(got) != 1 || got[0] != jobs.TypeFinalize {
				t.Errorf("enqueued %q, want finalize after the last file", got)
			}
			if tc.wantSettle != "" {
				if got := adm.Events("settle"); len(got) != 1 || !strings.HasPrefix(got[0], tc.wantSettle) {
					t.Errorf("settled %q, want one %q…", got, tc.wantSettle)
				}
			}
			if tc.wantRefund {
				if got := adm.Events("settle"); len(got) != 1 || !strings.HasSuffix(got[0], " 0") {
					t.Errorf("settled %q, want zero: no call was made", got)
				}
			}
			if tc.quota > 0 {
				if model.Calls() != 0 {
					t.Errorf("%d LLM calls past the quota", model.Calls())
				}
				run, err := st.GetRun(ctx, pr)
				if err != nil || run.SkippedQuota != 1 {
					t.Errorf("run counts %d files skipped for quota (%v), want 1", run.SkippedQuota, err)
				}
			}
		})
	}
}

func TestFileWorkerStaleHeadIsRevoked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, adm, q, model := newStore(t), &fakeAdmission{}, &fakeQueue{}, &fakeLLM{CompleteFunc: answer("never")}
	pr := testPR(t, 211)
	f, task := plannedFile(t, st, pr, jobs.KindSummary)
	if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h2", Tier: jobs.TierPaid, SummaryTotal: 1}, nil); err != nil {
		t.Fatal(err)
	}
	err := newFileWorker(t, st, adm, newCaller(t, adm, model, nil, nil), q, nil).ProcessTask(ctx, task)
	if !errors.Is(err, asynq.RevokeTask) {
		t.Fatalf("ProcessTask = %v, want the task revoked", err)
	}
	if model.Calls() != 0 || len(q.Tasks()) != 0 {
		t.Errorf("a superseded head's job called the LLM %d times, enqueued %q", model.Calls(), q.Tasks())
	}
	// no call was made: its reservation is settled to zero, all of the
	// estimate back in the bucket (settling the estimate kept it charged)
	if got := adm.Events("settle"); len(got) != 1 || got[0] != "settle "+jobs.FileTaskID(f)+" 0" {
		t.Errorf("settled %q, want zero", got)
	}
}

func TestFileWorkerLogsWhatAdmissionRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	adm := &fakeAdmission{
		StartedFunc: func(string) error { return errors.New("redis: connection refused") },
		SettleFunc:  func(string, ratelimit.Cost) error { return errors.New("redis: connection refused") },
	}
	st, q, model := newStore(t), &fakeQueue{}, &fakeLLM{CompleteFunc: answer("Adds b.")}
	c, err := workers.NewCaller(workers.CallerConfig{LLM: model, Ledger: adm, Requeue: adm, Provider: adm, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	_, task := plannedFile(t, st, testPR(t, 212), jobs.KindSummary)
	if err := newFileWorker(t, st, adm, c, q, log).ProcessTask(ctx, task); err != nil {
		t.Fatalf("the job failed for admission's bookkeeping: %v", err)
	}
	for _, want := range []string{"could not record the job's start", "could not settle the call in admission"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	// a job with nothing to settle (a retry) is not worth a warning
	logs2 := &syncBuffer{}
	adm2 := &fakeAdmission{SettleFunc: func(string, ratelimit.Cost) error { return ratelimit.ErrNotReserved }}
	c2, _ := workers.NewCaller(workers.CallerConfig{LLM: model, Ledger: adm2, Requeue: adm2, Provider: adm2, Log: slog.New(slog.NewTextHandler(logs2, nil))})
	_, task2 := plannedFile(t, st, testPR(t, 213), jobs.KindSummary)
	if err := newFileWorker(t, st, adm2, c2, q, nil).ProcessTask(ctx, task2); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs2.String(), "WARN") {
		t.Errorf("warned of a settle with nothing reserved:\n%s", logs2)
	}
}

// pushedBetween is a store on which a push lands right before (before)
// or right after the job's read of its run.
type pushedBetween struct {
	*store.Store
	t      *testing.T
	before bool
	once   *sync.Once
}

func (s pushedBetween) ReadFileJob(ctx context.Context, r store.FileJobRead) store.FileJobState {
	push := func() {
		s.once.Do(func() {
			if _, _, err := s.Store.StartRun(ctx, store.Run{PR: r.PR, Head: "h2", Tier: jobs.TierPaid, SummaryTotal: 1, Title: "the next head's title"}, nil); err != nil {
				s.t.Error(err)
			}
		})
	}
	if s.before {
		push()
	}
	st := s.Store.ReadFileJob(ctx, r)
	push()
	return st
}

// TestFileWorkerPromptOfTheHeadItRead: a push planned right after the
// job read its run: the job's call carries the title of the head it was
// planned for (read with the head, in one read), never the newer head's
// with the older head's file; a push before the read revokes it.
func TestFileWorkerPromptOfTheHeadItRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, adm, q := newStore(t), &fakeAdmission{}, &fakeQueue{}
	var mu sync.Mutex
	var sent []string
	model := &fakeLLM{CompleteFunc: func(r llm.Request) (llm.Response, error) {
		mu.Lock()
		sent = append(sent, strings.Join(r.Contents(), "\n"))
		mu.Unlock()
		return llm.Response{Text: "Adds b.", PromptTokens: 100, OutputTokens: 20}, nil
	}}
	for i, before := range []bool{false, true} {
		pr := testPR(t, int64(212+i))
		_, task := plannedFile(t, st, pr, jobs.KindSummary)
		w, err := workers.NewFileWorker(workers.FileWorkerConfig{Attempts: newAttempts(t), Store: pushedBetween{st, t, before, &sync.Once{}}, Ledger: adm,
			Caller: newCaller(t, adm, model, nil, nil), Queue: q, Models: testModels, Repairs: st, Requeue: adm})
		if err != nil {
			t.Fatal(err)
		}
		err = w.ProcessTask(ctx, task)
		if before {
			if !errors.Is(err, asynq.RevokeTask) || model.Calls() != 1 {
				t.Fatalf("pushed before the read: %v, %d calls; want the task revoked with no call", err, model.Calls())
			}
			continue
		}
		if err != nil || len(sent) != 1 {
			t.Fatalf("pushed after the read: %v, %d calls; want the call of the head read", err, len(sent))
		}
		if strings.Contains(sent[0], "the next head's title") {
			t.Errorf("the call carries the next head's title:\n%s", sent[0])
		}
	}
}
