package bench

import (
	"math"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/jobs"
)

// TestFairnessWorkload: three tenants per tier, each opening the same
// number of ordinary PRs early in the span; same seed, same workload.
func TestFairnessWorkload(t *testing.T) {
	var prs []corpus.PR
	patch := "@@ -1 +1 @@\n-a\n+b\n"
	for i := 0; i < 20; i++ {
		p := corpus.PR{Repo: "acme/r", Title: "t", BaseSHA: "b"}
		for f := 0; f <= i%15; f++ {
			p.Files = append(p.Files, corpus.File{Filename: "f.go", Status: "modified", Patch: &patch})
		}
		prs = append(prs, p)
	}
	b := Flags{sim: 10 * time.Minute, compress: 10, seed: 3}
	w := buildFairnessWorkload(prs, b)
	if len(w.insts) != 3*fairTenants {
		t.Fatalf("%d tenants", len(w.insts))
	}
	perTenant := map[int64]int{}
	perTier := map[jobs.Tier]map[int64]bool{}
	for _, e := range w.events {
		if e.at > time.Minute/10 {
			t.Fatalf("a PR opens at %s, after the first tenth of the span", e.at)
		}
		perTenant[e.pr.Installation]++
		if perTier[e.tier] == nil {
			perTier[e.tier] = map[int64]bool{}
		}
		perTier[e.tier][e.pr.Installation] = true
	}
	for inst, n := range perTenant {
		if n != fairPRs {
			t.Errorf("tenant %d opens %d PRs, want %d", inst, n, fairPRs)
		}
	}
	for _, tier := range []jobs.Tier{jobs.TierPaid, jobs.TierTrial, jobs.TierFree} {
		if len(perTier[tier]) != fairTenants {
			t.Errorf("%s has %d tenants", tier, len(perTier[tier]))
		}
	}
	for _, p := range w.prs {
		if len(p.Files) > 12 {
			t.Errorf("a PR of %d files in the fairness workload", len(p.Files))
		}
	}
	again := buildFairnessWorkload(prs, b)
	for i := range w.events {
		if w.events[i].at != again.events[i].at || w.events[i].pr != again.events[i].pr {
			t.Fatal("same seed, different workload")
		}
	}
}

// TestTierShares: shares count only windows in which every tier waited
// the whole window.
func TestTierShares(t *testing.T) {
	tiers := map[int64]jobs.Tier{1: jobs.TierPaid, 2: jobs.TierTrial, 3: jobs.TierFree}
	period := time.Second // windows of 5 s = 5000 ms
	var calls []callRecord
	// 0-5 s: all three wait (a job of each created at 0, called at 5000+);
	// paid gets 800, trial 200, free 100
	for tenant, tok := range map[int64]int64{1: 800, 2: 200, 3: 100} {
		calls = append(calls, callRecord{Kind: "summary", Tenant: tenant, Created: 0, At: 1000, Tokens: tok})
		calls = append(calls, callRecord{Kind: "summary", Tenant: tenant, Created: 0, At: 5000, Tokens: 1})
	}
	// 5-10 s: free no longer waits; paid takes everything
	calls = append(calls, callRecord{Kind: "summary", Tenant: 1, Created: 5000, At: 10000, Tokens: 5000})
	calls = append(calls, callRecord{Kind: "summary", Tenant: 2, Created: 5000, At: 10000, Tokens: 1})
	calls = append(calls, callRecord{Kind: "review", Tenant: 3, Created: 0, At: 10000, Tokens: 7})                    // another kind
	calls = append(calls, callRecord{Kind: "summary", Tenant: 3, Created: 0, At: 2000, Tokens: 9000, Outcome: "429"}) // refused
	got, windows := tierShares(calls, tiers, "summary", 5*period)
	if windows != 1 {
		t.Fatalf("%d windows with all tiers waiting, want 1", windows)
	}
	for tier, want := range map[string]float64{"paid": 800.0 / 1100, "trial": 200.0 / 1100, "free": 100.0 / 1100} {
		if math.Abs(got[tier]-want) > 1e-9 {
			t.Errorf("%s share %.4f, want %.4f", tier, got[tier], want)
		}
	}
}

// TestTierSharesOfPresentTiers: free has no reviews; review shares count
// windows in which the tiers that have reviews all wait.
func TestTierSharesOfPresentTiers(t *testing.T) {
	tiers := map[int64]jobs.Tier{1: jobs.TierPaid, 2: jobs.TierTrial, 3: jobs.TierFree}
	calls := []callRecord{
		{Kind: "review", Tenant: 1, Created: 0, At: 5000, Tokens: 80},
		{Kind: "review", Tenant: 2, Created: 0, At: 5000, Tokens: 20},
		{Kind: "review", Tenant: 1, Created: 0, At: 1000, Tokens: 800},
		{Kind: "review", Tenant: 2, Created: 0, At: 2000, Tokens: 200},
		{Kind: "summary", Tenant: 3, Created: 0, At: 10, Tokens: 5000},
	}
	got, windows := tierShares(calls, tiers, "review", 5*time.Second)
	if windows != 1 || math.Abs(got["paid"]-0.8) > 1e-9 || math.Abs(got["trial"]-0.2) > 1e-9 {
		t.Fatalf("shares %v over %d windows, want paid 0.8 trial 0.2 over 1", got, windows)
	}
}

// TestBackloggedByUnion: a tenant is backlogged through a window when its
// jobs' waits together cover it, though no single job waits that long.
func TestBackloggedByUnion(t *testing.T) {
	calls := []callRecord{
		{Kind: "review", Tenant: 1, Created: 0, At: 3000},
		{Kind: "review", Tenant: 1, Created: 2500, At: 6000},
		{Kind: "review", Tenant: 2, Created: 0, At: 2000},
		{Kind: "review", Tenant: 2, Created: 2100, At: 6000}, // a gap of 100 ms
	}
	w := waiting(calls, "review")
	if !backlogged(w[1], 0, 5000) {
		t.Error("tenant 1's overlapping waits cover [0, 5000]")
	}
	if backlogged(w[2], 0, 5000) {
		t.Error("tenant 2 had nothing waiting in (2000, 2100)")
	}
}

// TestJainSummed: tokens are summed over the windows in which all of a
// tier's tenants wait; a window in which one of them does not is left out.
func TestJainSummed(t *testing.T) {
	tiers := map[int64]jobs.Tier{1: jobs.TierPaid, 2: jobs.TierPaid}
	calls := []callRecord{
		// 0-5 s: both wait; 1 gets 300 in two calls, 2 gets 100
		{Kind: "review", Tenant: 1, Created: 0, At: 1000, Tokens: 200},
		{Kind: "review", Tenant: 1, Created: 0, At: 5000, Tokens: 100},
		{Kind: "review", Tenant: 2, Created: 0, At: 2000, Tokens: 100},
		{Kind: "review", Tenant: 2, Created: 0, At: 9000, Tokens: 1},
		// 5-10 s: tenant 1 does not wait; 2 gets 5000 (left out)
		{Kind: "review", Tenant: 2, Created: 5000, At: 6000, Tokens: 5000},
	}
	got := jainSummed(calls, tiers, 5*time.Second)
	// tokens in [0, 5000): 1 -> 200, 2 -> 100: (300)^2 / (2 * (200^2 + 100^2)) = 0.9
	if math.Abs(got["paid"]-0.9) > 1e-9 {
		t.Fatalf("Jain %v, want paid 0.9", got)
	}
}
