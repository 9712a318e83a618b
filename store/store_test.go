package store_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared() // first: its output reader ends with the server
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func TestLastFileTriggersFinalizeOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := store.New(redistest.Shared(t).Client(t), jobs.TierFree)
	pr := jobs.PR{Installation: 1, Owner: "o", Repo: "r", Number: 1}
	if _, started, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", Tier: jobs.TierPaid, SummaryTotal: 20, ReviewTotal: 20}, nil); err != nil || !started {
		t.Fatal(started, err)
	}
	var last atomic.Int64
	var wg sync.WaitGroup
	for k := 0; k < 3; k++ { // every result delivered three times, concurrently
		for i := 0; i < 20; i++ {
			for _, kind := range []jobs.Kind{jobs.KindSummary, jobs.KindReview} {
				wg.Add(1)
				go func(i int, kind jobs.Kind) {
					defer wg.Done()
					l, err := st.CompleteFile(ctx, pr, "h1", store.Result{Kind: kind, Index: i, Path: "f"})
					if err != nil {
						t.Error(err)
					}
					if l {
						last.Add(1)
					}
				}(i, kind)
			}
		}
	}
	wg.Wait()
	if last.Load() != 1 {
		t.Fatalf("finalize triggered %d times, want exactly once", last.Load())
	}
	run, _ := st.GetRun(ctx, pr)
	if run.SummaryDone != 20 || run.ReviewDone != 20 {
		t.Fatalf("progress %+v", run)
	}
	// a stale head's results are refused
	if l, _ := st.CompleteFile(ctx, pr, "old-head", store.Result{Kind: jobs.KindSummary, Index: 0}); l {
		t.Fatal("a stale head triggered finalize")
	}
}

func TestSupersedeAndPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := store.New(redistest.Shared(t).Client(t), jobs.TierTrial)
	pr := jobs.PR{Installation: 2, Owner: "o", Repo: "r", Number: 2}
	st.StartRun(ctx, store.Run{PR: pr, Head: "a", SummaryTotal: 1}, []store.FileData{{Path: "x.go", Index: 0, Patch: "@@ -1 +1 @@\n-a\n+b"}})
	if _, started, _ := st.StartRun(ctx, store.Run{PR: pr, Head: "a", SummaryTotal: 1}, nil); started {
		t.Fatal("the same head planned twice")
	}
	prev, started, err := st.StartRun(ctx, store.Run{PR: pr, Head: "b", SummaryTotal: 1}, nil)
	if err != nil || !started || prev != "a" {
		t.Fatalf("new head: %q %v %v", prev, started, err)
	}
	if ok, _ := st.Current(ctx, pr, "a"); ok {
		t.Fatal("the superseded head is still current")
	}
	if head, err := st.Cancel(ctx, pr); err != nil || head != "b" {
		t.Fatalf("cancel: %q %v", head, err)
	}
	if ok, _ := st.Current(ctx, pr, "b"); ok {
		t.Fatal("a cancelled head is still current")
	}
	// plans: default, explicit, and a Marketplace account plan
	if tier, _ := st.Tier(ctx, 99); tier != jobs.TierTrial {
		t.Fatalf("default tier %s", tier)
	}
	st.SetInstallation(ctx, 99, "acme", 5, "created")
	st.SetAccountTier(ctx, 5, jobs.TierPaid, "paid_user")
	if tier, _ := st.Tier(ctx, 99); tier != jobs.TierPaid {
		t.Fatalf("marketplace tier not applied: %s", tier)
	}
	st.UpdatePlan(ctx, 99, func(p *store.Plan) { p.Tier, p.Explicit = jobs.TierFree, true })
	if tier, _ := st.Tier(ctx, 99); tier != jobs.TierFree {
		t.Fatalf("an operator's plan must win: %s", tier)
	}
	if err := st.SetPlan(ctx, store.Plan{Installation: 1, Tier: "gold"}); err == nil {
		t.Fatal("unknown tier stored")
	}
}

func TestPostedFindings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := store.New(redistest.Shared(t).Client(t), jobs.TierFree)
	pr := jobs.PR{Installation: 1, Owner: "o", Repo: "r", Number: 4901}
	if got, err := s.PostedFindings(ctx, pr); err != nil || len(got) != 0 {
		t.Fatalf("before any: %v %v", got, err)
	}
	if err := s.SetPosted(ctx, pr, "review:h1", 9); err != nil {
		t.Fatal(err)
	}
	at := func(what, path string) store.PostedFinding {
		return store.PostedFinding{What: what, Path: path, Lines: "x := f()"}
	}
	if err := s.AddPostedFindings(ctx, pr, map[string]store.PostedFinding{"a": at("review:h1", "a.go"), "b": at("review:h1", "b.go")}); err != nil {
		t.Fatal(err)
	}
	// b again from a later review keeps the review it was first posted in
	if err := s.AddPostedFindings(ctx, pr, map[string]store.PostedFinding{"b": at("review:h2", "b.go"), "c": at("review:h2", "c.go")}); err != nil {
		t.Fatal(err)
	}
	if err := s.ClosePostedFinding(ctx, pr, "a"); err != nil {
		t.Fatal(err)
	}
	got, err := s.PostedFindings(ctx, pr)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]store.PostedFinding{"b": at("review:h1", "b.go"), "c": at("review:h2", "c.go")}
	if len(got) != len(want) || got["b"] != want["b"] || got["c"] != want["c"] {
		t.Fatalf("got %v, want %v", got, want)
	}
	if n, err := s.Posted(ctx, pr, "review:h1"); err != nil || n != 9 {
		t.Fatalf("the review's own record: %d %v", n, err)
	}
}

// TestTenantIsTierAndDisabled: Tenant answers what Tier and Disabled
// answer, from one read of the plan, whatever the installation's state.
func TestTenantIsTierAndDisabled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := store.New(redistest.Shared(t).Client(t), jobs.TierTrial)
	st.SetAccountTier(ctx, 77, jobs.TierPaid, "paid_user")
	for _, tc := range []struct {
		name     string
		inst     int64
		set      func(id int64)
		wantTier jobs.Tier
		wantWhy  string
	}{
		{"no plan", 701, func(int64) {}, jobs.TierTrial, ""},
		{"marketplace", 702, func(id int64) { st.SetInstallation(ctx, id, "acme", 77, "created") }, jobs.TierPaid, ""},
		{"explicit", 703, func(id int64) {
			st.SetInstallation(ctx, id, "acme", 77, "created")
			st.UpdatePlan(ctx, id, func(p *store.Plan) { p.Tier, p.Explicit = jobs.TierFree, true })
		}, jobs.TierFree, ""},
		{"suspended", 704, func(id int64) { st.SetInstallation(ctx, id, "acme", 77, "suspend") }, "", store.DisabledSuspended},
		{"deleted", 705, func(id int64) { st.SetInstallation(ctx, id, "acme", 0, "deleted") }, "", store.DisabledDeleted},
		{"token refused", 706, func(id int64) { st.MarkTokenRefused(ctx, id, "uninstalled") }, "", store.DisabledTokenRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.set(tc.inst)
			tier, why, err := st.Tenant(ctx, tc.inst)
			if err != nil || why != tc.wantWhy || (why == "" && tier != tc.wantTier) {
				t.Fatalf("Tenant: %q %q %v, want %q %q", tier, why, err, tc.wantTier, tc.wantWhy)
			}
			wantTier, _ := st.Tier(ctx, tc.inst)
			wantWhy, _ := st.Disabled(ctx, tc.inst)
			if why != wantWhy || (why == "" && tier != wantTier) {
				t.Fatalf("Tenant %q %q, Tier and Disabled %q %q", tier, why, wantTier, wantWhy)
			}
		})
	}
}
