package bench

import (
	"fmt"
	"math/rand"
	"sort"
	"time"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/jobs"
)

// Workloads of `prq bench --workload`.
const (
	// WorkloadDefault: arrivals spread over the span, one tenant with very
	// large PRs, chat bursts (buildWorkload).
	WorkloadDefault = "default"
	// WorkloadFairness: three tenants per tier open many ordinary PRs at
	// once, so that every tenant of every tier stays backlogged for
	// minutes: the setting in which fair shares can be measured.
	WorkloadFairness = "fairness"
)

// fairTenants is how many tenants of each tier the fairness workload
// runs, and fairPRs how many PRs each opens.
const (
	fairTenants = 3
	fairPRs     = 8
)

// buildFairnessWorkload: fairTenants tenants per tier each open fairPRs
// ordinary PRs (1 to 12 files) in the first tenth of the span, in a
// seeded shuffle, so demand exceeds both models' limits for minutes while
// every tenant waits. No chat: chat has its own cap and would blur the
// tiers' shares. Same seed, same workload.
func buildFairnessWorkload(prs []corpus.PR, b Flags) benchWorkload {
	rng := rand.New(rand.NewSource(b.seed))
	span := time.Duration(float64(b.sim) / b.compress)
	w := benchWorkload{tiers: map[int64]jobs.Tier{}}
	var normal []corpus.PR
	for _, p := range prs {
		if n := len(p.Files); n > 0 && n <= 12 {
			normal = append(normal, p)
		}
	}
	inst := int64(0)
	for _, tier := range []jobs.Tier{jobs.TierPaid, jobs.TierTrial, jobs.TierFree} {
		for k := 0; k < fairTenants; k++ {
			inst++
			w.tiers[inst] = tier
			w.insts = append(w.insts, inst)
		}
	}
	number := 1
	for round := 0; round < fairPRs; round++ {
		for _, i := range rng.Perm(len(w.insts)) {
			id := w.insts[i]
			p := normal[rng.Intn(len(normal))]
			p.Number = number
			number++
			p.HeadSHA = fmt.Sprintf("%040x", rng.Uint64())
			owner := fmt.Sprintf("tenant-%d", id)
			w.prs = append(w.prs, p)
			pr := jobs.PR{Installation: id, Owner: owner, Repo: p.Name(), Number: p.Number}
			at := time.Duration(rng.Float64() * float64(span) / 10)
			body := traffic.PullRequestEvent("opened", traffic.PR{Installation: id, Owner: owner, Repo: p.Name(), Number: p.Number, Title: p.Title, Head: p.HeadSHA, Base: p.BaseSHA})
			w.events = append(w.events, benchEvent{at: at, event: "pull_request", body: body, pr: pr, tier: w.tiers[id]})
		}
	}
	sortEvents(w.events)
	return w
}

// tierShares is each tier's share of the tokens of kind admitted in
// windows of five periods in which every tier had a tenant waiting the
// whole window (only then do the weights decide), with the tiers' weights
// as shares for comparison.
func tierShares(calls []callRecord, tiers map[int64]jobs.Tier, kind string, period time.Duration) (got map[string]float64, windows int) {
	got = map[string]float64{}
	if len(calls) == 0 {
		return got, 0
	}
	lo, hi := calls[0].At, calls[0].At
	for _, c := range calls {
		lo, hi = min(lo, c.Created, c.At), max(hi, c.At)
	}
	step := 5 * period.Milliseconds()
	tok := map[jobs.Tier]float64{}
	for t := lo; t+step <= hi; t += step {
		back := map[jobs.Tier]bool{}
		for _, c := range calls {
			if c.Kind == kind && c.Outcome != "429" && c.Created <= t && c.At >= t+step {
				back[tiers[c.Tenant]] = true
			}
		}
		if len(back) < 3 {
			continue
		}
		windows++
		for _, c := range calls {
			if c.Kind == kind && c.Outcome != "429" && c.At >= t && c.At < t+step {
				tok[tiers[c.Tenant]] += float64(c.Tokens)
			}
		}
	}
	var sum float64
	for _, v := range tok {
		sum += v
	}
	if sum == 0 {
		return got, windows
	}
	for tier, v := range tok {
		got[string(tier)] = v / sum
	}
	return got, windows
}

func sortEvents(ev []benchEvent) {
	sort.SliceStable(ev, func(i, j int) bool { return ev[i].at < ev[j].at })
}
