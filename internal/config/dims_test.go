package config

import (
	"strings"
	"testing"
)

// TestInputOutputLimits: input_tokens_per_minute and
// output_tokens_per_minute reach the bucket's limits; with both and no
// tokens_per_minute the total is their sum; a negative one is refused
// naming the model.
func TestInputOutputLimits(t *testing.T) {
	c := loadYAML(t, `
providers:
  - {name: claude, kind: anthropic, key_env: ANTHROPIC_API_KEY}
models:
  - {name: claude-haiku, provider: claude, requests_per_minute: 50, input_tokens_per_minute: 50000, output_tokens_per_minute: 10000}
  - {name: claude-sonnet, provider: claude, requests_per_minute: 50, tokens_per_minute: 40000, output_tokens_per_minute: 8000}
jobs: {summary_model: claude-haiku, review_model: claude-sonnet, chat_model: claude-haiku}
`, map[string]string{"ANTHROPIC_API_KEY": "sk-ant-dims-1"})
	if err := c.Validate(ModeCheck); err != nil {
		t.Fatal(err)
	}
	haiku, _ := c.Model("claude-haiku")
	l, err := haiku.Limits()
	if err != nil || l.InputTokensPerPeriod != 50000 || l.OutputTokensPerPeriod != 10000 || l.TokensPerPeriod != 60000 {
		t.Fatalf("haiku: %+v %v; want input 50000, output 10000, total their sum", l, err)
	}
	sonnet, _ := c.Model("claude-sonnet")
	if l, err := sonnet.Limits(); err != nil || l.InputTokensPerPeriod != 0 || l.OutputTokensPerPeriod != 8000 || l.TokensPerPeriod != 40000 {
		t.Fatalf("sonnet: %+v %v; want output 8000 within a total of 40000", l, err)
	}
	c.Models[0].OutputTokensPerMinute = 800 // the default max_output_tokens is 1024
	if err := c.Validate(ModeCheck); err == nil || !strings.Contains(err.Error(), "max_output_tokens 1024 exceeds output_tokens_per_minute 800") {
		t.Fatalf("an output limit below the output cap: %v", err)
	}
	c.Models[0].OutputTokensPerMinute = -5
	if err := c.Validate(ModeCheck); err == nil || !strings.Contains(err.Error(), "models.claude-haiku") {
		t.Fatalf("negative output limit: %v", err)
	}
}
