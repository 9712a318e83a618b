package harness

import (
	"context"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/jobs"
)

// TestHungProviderCostsTheFirstByteLimit: a provider that takes a fifth
// of the calls and never sends a byte (the fake's hang, which outlasts
// the test) costs each such call the first-byte limit, then its retry
// through admission: every pull request is published, though the call
// timeout (10 minutes here) is far beyond the wait.
func TestHungProviderCostsTheFirstByteLimit(t *testing.T) {
	s := startStack(t, stackOpts{tune: func(c *config.Config) {
		c.OpenAI.Timeout = config.Duration(10 * time.Minute)
		c.OpenAI.FirstByteTimeout = config.Duration(time.Second)
	}})
	s.fakes.OpenAI.SetFaults(fakeopenai.Faults{Timeout: 0.2, TimeoutAfter: "1h"})
	var prs []jobs.PR
	for i, p := range testPRs(t, 4) {
		prs = append(prs, s.openPR(int64(300+i), jobs.TierPaid, p))
	}
	ctx := context.Background()
	s.waitFor("every PR published though a fifth of the calls hang", 90*time.Second, func() bool {
		for _, pr := range prs {
			if run, err := s.app.Store().GetRun(ctx, pr); err != nil || run.State != "done" {
				return false
			}
		}
		return true
	})
	var hung int64
	for _, st := range s.fakes.OpenAI.Stats() {
		hung += st.Faults
	}
	if hung == 0 {
		t.Fatal("no call hung: the test proved nothing")
	}
	for _, pr := range prs {
		if n := s.summaryComments(pr); n != 1 {
			t.Fatalf("%v: %d summaries, want exactly 1", pr, n)
		}
	}
	t.Logf("%d calls hung; each was abandoned at the first-byte limit and retried", hung)
}
