package workers_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// While a head's jobs wait in line, its check run says how many jobs
// are ahead of its first file and, once admission's rate is measured
// (a stepped clock), when it should start; both fall as work is
// admitted, and the reports stop once its first job leaves the line.
func TestQueueReporterShowsPositionAndEstimate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	model := fmt.Sprintf("queue-%d", time.Now().UnixNano())
	b, err := ratelimit.NewBucket(rdb, model, "sk", ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 100000000, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{now: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
	adm, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: b}, nil, nil, admission.Config{NowFunc: clk.Now}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	st := newStore(t)
	pr := testPR(t, 241)
	rig := newGHRig(t, pr)
	checks, err := workers.NewChecks(workers.ChecksConfig{GitHub: workers.Installations{App: rig.app}, Store: st, Turns: newPacer(t), Every: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	line, err := workers.NewQueueReporter(workers.QueueReporterConfig{Store: st, Positions: adm, Checks: checks, Every: time.Millisecond, NowFunc: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	tenant := strconv.FormatInt(pr.Installation, 10)
	register := func(id string, seq int64, i int) {
		t.Helper()
		if _, err := adm.Register(ctx, admission.Ticket{ID: id, Queue: "paid", Model: model, Class: "paid", Tenant: tenant, PRSeq: seq, Index: i, Total: 10, Tokens: 100}); err != nil {
			t.Fatal(err)
		}
	}
	// the tenant's older pull request: 10 jobs ahead
	for i := range 10 {
		register(fmt.Sprintf("older-%s-%d", t.Name(), i), 1, i)
	}
	if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", Tier: jobs.TierPaid, SummaryTotal: 2},
		[]store.FileData{{Path: "a.go", Patch: patchA}, {Path: "b.go", Index: 1, Patch: patchA}}); err != nil {
		t.Fatal(err)
	}
	ids := []string{"mine-" + t.Name() + "-0", "mine-" + t.Name() + "-1"}
	for i, id := range ids {
		register(id, 2, i)
	}
	if err := st.SetTaskIDs(ctx, pr, "h1", ids); err != nil {
		t.Fatal(err)
	}
	checks.Queued(ctx, pr, "h1", 2, "", time.Time{})
	report := func() string {
		t.Helper()
		time.Sleep(2 * time.Millisecond) // past the writes' pacing
		if _, err := line.Report(ctx); err != nil {
			t.Fatal(err)
		}
		cs := rig.fake.CheckRuns(pr.Owner, pr.Repo, "h1")
		if len(cs) != 1 {
			t.Fatalf("check runs %+v, want one", cs)
		}
		if cs[0].Status != "queued" {
			t.Fatalf("check run %+v, want it queued", cs[0])
		}
		return cs[0].Title
	}
	admit := func(n int) {
		t.Helper()
		if a, _, err := adm.Admit(ctx, model, n); err != nil || len(a) != n {
			t.Fatalf("admit %d: %v %v", n, a, err)
		}
	}
	steps := []struct {
		admit int
		want  string
	}{
		{0, "Waiting: 10 jobs ahead in paid"},
		{5, "Waiting: 5 jobs ahead in paid; about 10 s"}, // 5 admitted in 10 s: 0.5 a second
		{4, "Waiting: 1 job ahead in paid; about 5 s"},   // 4 in 10 s: the rate halves toward 0.4 (0.45)
		{1, "Waiting: next in line in paid"},
	}
	for i, s := range steps {
		if i > 0 {
			clk.Add(10 * time.Second)
			admit(s.admit)
		}
		if got := report(); got != s.want {
			t.Fatalf("step %d: check run says %q, want %q", i, got, s.want)
		}
	}
	writes := len(rig.fake.CheckRuns(pr.Owner, pr.Repo, "h1")[0].History)
	if got := report(); got != steps[len(steps)-1].want || len(rig.fake.CheckRuns(pr.Owner, pr.Repo, "h1")[0].History) != writes {
		t.Fatalf("an unchanged position was written again (%q)", got)
	}
	// its first job leaves the line: no more reports
	admit(1)
	if n, err := line.Report(ctx); err != nil || n != 0 {
		t.Fatalf("Report = %d, %v after the head's first admission, want nothing to report", n, err)
	}
	run, err := st.GetRun(ctx, pr)
	if err != nil {
		t.Fatal(err)
	}
	if _, waiting, err := line.Where(ctx, run); err != nil || waiting {
		t.Fatalf("Where = waiting %v (%v), want not waiting once a job left the line", waiting, err)
	}
}
