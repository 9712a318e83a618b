package harness

import (
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/jobs"
)

// TestFlexLaneEndToEnd: the trial tier's jobs go to flex processing (the
// fake's models serve it, refusing every third flex call for want of
// capacity); paid stays standard. A trial head's queued check run says
// so. Every pull request is published once;
// flex's calls are priced in lane flex, the refused ones were called
// again at the standard tier; no call was refused for a limit.
func TestFlexLaneEndToEnd(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{tune: func(c *config.Config) {
		trial := c.Tiers["trial"]
		trial.Lane = config.LaneFlex
		c.Tiers["trial"] = trial
		for i := range c.Models {
			c.Models[i].Flex = true
		}
	}})
	s.fakes.OpenAI.SetFaults(fakeopenai.Faults{FlexRefuseEvery: 3})
	var prs []jobs.PR
	for i, p := range testPRs(t, 6) {
		tier := jobs.TierPaid
		if i%2 == 1 {
			tier = jobs.TierTrial
		}
		prs = append(prs, s.openPR(int64(i+1), tier, p))
	}
	s.waitDone(prs, 90*time.Second)
	for i, pr := range prs {
		p := s.published(pr) // one summary each, checked there
		// the queued check run says where the head's files go
		said := len(p.check.History) > 0 && strings.Contains(p.check.History[0].Summary, "flex lane")
		if trial := i%2 == 1; said != trial {
			t.Errorf("%s (trial %v): the queued check run says %q", pr, trial, p.check.History[0].Summary)
		}
	}
	var flex, refused, limited int64
	for _, st := range s.fakes.OpenAI.Stats() {
		flex, refused, limited = flex+st.Flex, refused+st.FlexRefused, limited+st.RateLimited
	}
	if flex == 0 || refused == 0 || limited != 0 {
		t.Fatalf("the fake saw %d flex calls, %d refused, %d 429s for a limit: want flex used, some refused, no limit hit", flex, refused, limited)
	}
	if got := s.metric("prq_llm_cost_dollars_total", map[string]string{"tier": "trial", "lane": "flex"}); got <= 0 {
		t.Errorf("trial's flex calls cost %v, want them priced in lane flex", got)
	}
	if got := s.metric("prq_llm_cost_dollars_total", map[string]string{"tier": "paid", "lane": "flex"}); got != 0 {
		t.Errorf("paid's calls cost %v in lane flex, want none: paid is standard", got)
	}
	if got := s.metric("prq_llm_cost_dollars_total", map[string]string{"tier": "trial", "lane": "sync"}); got <= 0 {
		t.Errorf("trial's refused jobs cost %v at the standard tier, want them called there", got)
	}
	if got := s.metric("prq_llm_calls_total", map[string]string{"outcome": "flex_unavailable"}); got != float64(refused) {
		t.Errorf("prq_llm_calls_total{outcome=flex_unavailable} = %v, want the fake's %d refusals", got, refused)
	}
}
