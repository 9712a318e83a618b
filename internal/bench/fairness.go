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
	fairPRs     = 16
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
// windows in which every tier with calls of that kind had a tenant with a
// job waiting through the whole window (only then do the weights decide).
func tierShares(calls []callRecord, tiers map[int64]jobs.Tier, kind string, window time.Duration) (got map[string]float64, windows int) {
	got = map[string]float64{}
	if len(calls) == 0 {
		return got, 0
	}
	lo, hi := callSpan(calls)
	present := map[jobs.Tier]bool{}
	for _, c := range calls {
		if c.Kind == kind {
			present[tiers[c.Tenant]] = true
		}
	}
	if len(present) < 2 {
		return got, 0
	}
	step := window.Milliseconds()
	tok := map[jobs.Tier]float64{}
	spans := waiting(calls, kind)
	for t := lo; t+step <= hi; t += step {
		back := map[jobs.Tier]bool{}
		for tenant, sp := range spans {
			if backlogged(sp, t, t+step) {
				back[tiers[tenant]] = true
			}
		}
		if len(back) < len(present) {
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

// waiting is, per tenant, the stretches (unix ms) in which it had a job
// of kind waiting: the union of its calls' [created, called] spans.
func waiting(calls []callRecord, kind string) map[int64][][2]int64 {
	spans := map[int64][][2]int64{}
	for _, c := range calls {
		if c.Kind == kind && c.Outcome != "429" {
			spans[c.Tenant] = append(spans[c.Tenant], [2]int64{c.Created, c.At})
		}
	}
	for tenant, sp := range spans {
		sort.Slice(sp, func(i, j int) bool { return sp[i][0] < sp[j][0] })
		merged := [][2]int64{sp[0]}
		for _, x := range sp[1:] {
			last := &merged[len(merged)-1]
			if x[0] <= last[1] {
				last[1] = max(last[1], x[1])
			} else {
				merged = append(merged, x)
			}
		}
		spans[tenant] = merged
	}
	return spans
}

// backlogged reports whether a tenant's waiting stretches cover [from, to].
func backlogged(spans [][2]int64, from, to int64) bool {
	for _, s := range spans {
		if s[0] <= from && s[1] >= to {
			return true
		}
	}
	return false
}

func sortEvents(ev []benchEvent) {
	sort.SliceStable(ev, func(i, j int) bool { return ev[i].at < ev[j].at })
}

// jainSummed is Jain's index of the tokens each tenant of a tier got,
// summed over the windows in which every tenant of the tier (with calls
// of the tier's kind) had a job waiting throughout: long-run fairness
// while all wait, which fair queuing promises (per-window shares also
// carry the lumpiness of single calls; see jain).
func jainSummed(calls []callRecord, tiers map[int64]jobs.Tier, window time.Duration) map[string]float64 {
	kindOf := map[jobs.Tier]string{jobs.TierPaid: "review", jobs.TierTrial: "review", jobs.TierFree: "summary"}
	out := map[string]float64{}
	if len(calls) == 0 {
		return out
	}
	lo, hi := callSpan(calls)
	step := window.Milliseconds()
	for _, tier := range []jobs.Tier{jobs.TierPaid, jobs.TierTrial, jobs.TierFree} {
		kind := kindOf[tier]
		spans := waiting(calls, kind)
		var members []int64
		for tenant := range spans {
			if tiers[tenant] == tier {
				members = append(members, tenant)
			}
		}
		if len(members) < 2 {
			continue
		}
		got := map[int64]float64{}
		windows := 0
		for t := lo; t+step <= hi; t += step {
			all := true
			for _, m := range members {
				all = all && backlogged(spans[m], t, t+step)
			}
			if !all {
				continue
			}
			windows++
			for _, c := range calls {
				if tiers[c.Tenant] == tier && c.Kind == kind && c.Outcome != "429" && c.At >= t && c.At < t+step {
					got[c.Tenant] += float64(c.Tokens)
				}
			}
		}
		var s, s2 float64
		for _, m := range members {
			s += got[m]
			s2 += got[m] * got[m]
		}
		if windows > 0 && s2 > 0 {
			out[string(tier)] = s * s / (float64(len(members)) * s2)
		}
	}
	return out
}

// callSpan is the recorded calls' time span (unix ms): from the first
// job planned or called to the last call. calls is not empty.
func callSpan(calls []callRecord) (lo, hi int64) {
	lo, hi = calls[0].At, calls[0].At
	for _, c := range calls {
		lo, hi = min(lo, c.Created, c.At), max(hi, c.At)
	}
	return lo, hi
}
