package harness

import (
	"regexp"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/jobs"
)

// dueBy is what a queued check run says of a head in the batch lane.
var dueBy = regexp.MustCompile(`go to the batch lane: .* answered by \d{4}-\d\d-\d\d \d\d:\d\d UTC at the latest`)

// TestBatchLaneEndToEnd: the trial tier's jobs go through the batch lane
// (the fake's batch APIs), paid's through admission. In "answered" every
// trial call is a batch request, in "expired" each batch expires with half
// its requests answered and the rest are called in the standard lane.
// Either way every pull request is published once, a trial head's
// queued check run says it is in the batch lane and when it is due, the
// batch's calls are priced in lane batch, and no call hits a limit.
func TestBatchLaneEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		faults fakeopenai.Faults
	}{
		{"answered", fakeopenai.Faults{}},
		{"expired", fakeopenai.Faults{BatchExpire: 1, BatchExpireDone: 0.5}},
	} {
		// a batch's requests are answered over 20 s (the fake's 10
		// minutes, compressed); an expiring one's window closes at 15 s
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startStack(t, stackOpts{record: true, tune: func(c *config.Config) {
				trial := c.Tiers["trial"]
				trial.Lane, trial.LaneWait = config.LaneBatch, config.Duration(time.Hour)
				c.Tiers["trial"] = trial
				for i := range c.Models {
					c.Models[i].Batch = true
				}
			}})
			s.fakes.OpenAI.SetFaults(tc.faults)
			if tc.faults.BatchExpire > 0 {
				s.fakes.OpenAI.SetBatchWindow(15 * time.Second)
			}
			var prs []jobs.PR
			trial := map[string]bool{}
			for i, p := range testPRs(t, 6) {
				tier := jobs.TierPaid
				if i%2 == 1 {
					tier, trial[p.Title] = jobs.TierTrial, true
				}
				prs = append(prs, s.openPR(int64(i+1), tier, p))
			}
			s.waitDone(prs, 120*time.Second)
			for i, pr := range prs {
				p := s.published(pr) // one summary, one review: checked there
				said := len(p.check.History) > 0 && dueBy.MatchString(p.check.History[0].Summary)
				if isTrial := i%2 == 1; said != isTrial {
					t.Errorf("%s (trial %v): the queued check run says %q", pr, isTrial, p.check.History[0].Summary)
				}
			}
			var batched, synced, answered int
			for _, c := range s.fakes.OpenAI.Calls() {
				if c.Status != 200 {
					continue
				}
				switch {
				case !trial[c.Title] && c.Batch:
					t.Errorf("a paid call went by batch: %s %s", c.Model, c.Path)
				case trial[c.Title] && c.Batch:
					batched++
				case trial[c.Title]:
					synced++
				}
				answered++
			}
			var limited, requests, expired int64
			for _, st := range s.fakes.OpenAI.Stats() {
				limited += st.RateLimited
				requests += st.Batch.Requests
				expired += st.Batch.Expired
			}
			t.Logf("%d calls answered: trial %d by batch, %d in the standard lane; %d batch requests, %d batches expired", answered, batched, synced, requests, expired)
			if batched == 0 || limited != 0 {
				t.Fatalf("trial calls by batch: %d; calls refused for a limit: %d", batched, limited)
			}
			if tc.faults.BatchExpire > 0 && (synced == 0 || expired == 0) {
				t.Errorf("batches expired: %d; trial calls in the standard lane: %d, want some", expired, synced)
			}
			if tc.faults.BatchExpire == 0 && synced != 0 {
				t.Errorf("%d trial calls in the standard lane with every batch answered", synced)
			}
			if got := s.metric("prq_llm_cost_dollars_total", map[string]string{"tier": "trial", "lane": "batch"}); got <= 0 {
				t.Errorf("trial's batch calls cost %v, want them priced in lane batch", got)
			}
			if got := s.metric("prq_llm_cost_dollars_total", map[string]string{"tier": "paid", "lane": "batch"}); got != 0 {
				t.Errorf("paid's calls cost %v in lane batch, want none", got)
			}
		})
	}
}
