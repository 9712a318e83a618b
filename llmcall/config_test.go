package llmcall_test

import (
	"testing"

	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/llmcall"
)

// The one mapping from the configuration: prices set or listed, cache
// reads counted by the provider's kind unless set, the provider's keys.
func TestFromConfig(t *testing.T) {
	t.Parallel()
	counts := false
	for _, tc := range []struct {
		name string
		m    config.ModelConfig
		p    config.ProviderConfig
		want llmcall.Model
	}{
		{"openai, priced", config.ModelConfig{Name: "m", Prices: &config.PricesConfig{Input: 1, Output: 2}}, config.ProviderConfig{Kind: config.KindOpenAI, Keys: []config.Secret{"a", "b"}},
			llmcall.Model{Name: "m", Keys: 2, Prices: llm.Prices{Input: 1, Output: 2}}},
		{"anthropic, unpriced", config.ModelConfig{Name: "custom-claude"}, config.ProviderConfig{Kind: config.KindAnthropic},
			llmcall.Model{Name: "custom-claude", Keys: 1, CachedInputFree: true}},
		{"openai, cache reads not counted", config.ModelConfig{Name: "n", CachedInputCounts: &counts}, config.ProviderConfig{Kind: config.KindOpenAI},
			llmcall.Model{Name: "n", Keys: 1, CachedInputFree: true}},
	} {
		if got := llmcall.FromConfig(tc.m, tc.p); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
