package config

import (
	"strings"
	"testing"

	"github.com/prq-dev/prq/ratelimit"
)

// TestModelSettlePolicy: models[].settle reaches the bucket's policy, and
// a value prq does not know is refused naming the setting.
func TestModelSettlePolicy(t *testing.T) {
	for settle, want := range map[string]ratelimit.Policy{"": "", "estimate": ratelimit.PolicyEstimate, "debt": ratelimit.PolicyDebt, "refund": ratelimit.PolicyRefund} {
		c := Default()
		c.Models[0].Settle = settle
		l, err := c.Models[0].Limits()
		if err != nil || l.Policy != want {
			t.Errorf("settle %q: policy %q, %v; want %q", settle, l.Policy, err, want)
		}
	}
	c := Default()
	c.Models[1].Settle = "later"
	err := c.Validate(ModeCheck)
	if err == nil || !strings.Contains(err.Error(), "models.gpt-4o") || !strings.Contains(err.Error(), `settle policy must be "estimate", "debt" or "refund", got "later"`) {
		t.Fatalf("settle: later: %v", err)
	}
}
