package config

import (
	"strings"
	"testing"
	"time"

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

// TestLaneAndFlex: tiers.<name>.lane is standard, flex or batch; batch
// needs a model with batch: true, lane_wait at least a minute; flex on a
// model of an Anthropic provider is refused, naming the setting.
func TestLaneAndFlex(t *testing.T) {
	c := Default()
	trial := c.Tiers["trial"]
	trial.Lane = "overnight"
	c.Tiers["trial"] = trial
	if err := c.Validate(ModeCheck); err == nil || !strings.Contains(err.Error(), "tiers.trial.lane") || !strings.Contains(err.Error(), `want "standard", "flex" or "batch", got "overnight"`) {
		t.Fatalf("lane overnight: %v", err)
	}
	trial.Lane = LaneBatch
	c.Tiers["trial"] = trial
	if err := c.Validate(ModeCheck); err == nil || !strings.Contains(err.Error(), "tiers.trial.lane: batch, but neither jobs.summary_model nor jobs.review_model has batch: true") {
		t.Fatalf("lane batch without a batch model: %v", err)
	}
	for i := range c.Models {
		c.Models[i].Batch = c.Models[i].Name == c.Jobs.ReviewModel
	}
	trial.LaneWait = Duration(30 * time.Second)
	c.Tiers["trial"] = trial
	if err := c.Validate(ModeCheck); err == nil || !strings.Contains(err.Error(), "tiers.trial.lane_wait") {
		t.Fatalf("lane_wait of 30s: %v", err)
	}
	trial.LaneWait = Duration(2 * time.Hour)
	c.Tiers["trial"] = trial
	if err := c.Validate(ModeCheck); err != nil {
		t.Fatalf("lane batch on a batch model: %v", err)
	}
	trial.Lane = LaneFlex
	c.Tiers["trial"] = trial
	c.Models[0].Flex = true
	if err := c.Validate(ModeCheck); err != nil {
		t.Fatalf("lane flex on an OpenAI model: %v", err)
	}
	c.Providers = []ProviderConfig{{Name: "claude", Kind: KindAnthropic, BaseURL: "https://api.anthropic.com", KeyEnv: EnvList{"ANTHROPIC_API_KEY"}, Keys: []Secret{"sk-ant-" + Secret(strings.Repeat("x", 40))}}}
	for i := range c.Models {
		c.Models[i].Provider = "claude"
	}
	if err := c.Validate(ModeCheck); err == nil || !strings.Contains(err.Error(), "models."+c.Models[0].Name+".flex") {
		t.Fatalf("flex on an Anthropic model: %v", err)
	}
}
