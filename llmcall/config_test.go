package llmcall_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
)

// The one mapping from the configuration: prices set or listed, cache
// reads counted by the provider's kind unless set, the provider's keys,
// the schema counted as input by Anthropic, Azure's deployment, every
// per-model setting carried over.
func TestFromConfig(t *testing.T) {
	t.Parallel()
	counts := false
	openai := config.ProviderConfig{Name: "oa", Kind: config.KindOpenAI, KeyEnv: config.EnvList{"A", "B"}, Keys: []config.Secret{"a", "b"}}
	anthropic := config.ProviderConfig{Name: "an", Kind: config.KindAnthropic, KeyEnv: config.EnvList{"C"}}
	azure := config.ProviderConfig{Name: "az", Kind: config.KindAzure, KeyEnv: config.EnvList{"D"}, Deployments: map[string]string{"gpt-4o": "prod-4o"}}
	limits := func(m config.ModelConfig) *ratelimit.Limits {
		l, err := m.Limits()
		if err != nil {
			t.Fatal(err)
		}
		return &l
	}
	for _, tc := range []struct {
		name string
		m    config.ModelConfig
		p    config.ProviderConfig
		want llmcall.Model
	}{
		{"openai, priced, every setting", config.ModelConfig{Name: "m", Provider: "oa", RequestsPerMinute: 10, TokensPerMinute: 1000, Prices: &config.PricesConfig{Input: 1, Output: 2},
			MaxOutputTokens: 300, ContextTokens: 9000, Reasoning: true, Fallbacks: []string{"f"}, Flex: true, Batch: true, OutputFormat: "json_object"}, openai,
			llmcall.Model{Name: "m", Keys: 2, Prices: llm.Prices{Input: 1, Output: 2}, MaxOutput: 300, ContextTokens: 9000, Reasoning: true, Fallbacks: []string{"f"},
				Flex: true, Batch: true, Output: llm.FormatJSONObject}},
		{"anthropic, unpriced", config.ModelConfig{Name: "custom-claude", Provider: "an", RequestsPerMinute: 10, TokensPerMinute: 1000}, anthropic,
			llmcall.Model{Name: "custom-claude", Keys: 1, CachedInputFree: true, SchemaIsInput: true, FirstByte: 30 * time.Second}},
		{"openai, cache reads not counted", config.ModelConfig{Name: "n", Provider: "oa", RequestsPerMinute: 10, TokensPerMinute: 1000, CachedInputCounts: &counts}, openai,
			llmcall.Model{Name: "n", Keys: 2, CachedInputFree: true, FirstByte: 30 * time.Second}},
		{"azure deployment", config.ModelConfig{Name: "gpt-4o", Provider: "az", RequestsPerMinute: 10, TokensPerMinute: 1000}, azure,
			llmcall.Model{Name: "gpt-4o", Keys: 1, Deployment: "prod-4o", FirstByte: 30 * time.Second}},
	} {
		cfg := config.Default()
		cfg.Providers = []config.ProviderConfig{openai, anthropic, azure}
		cfg.Models = []config.ModelConfig{tc.m}
		got, err := llmcall.FromConfig(&cfg, tc.m)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.want.Prices == (llm.Prices{}) {
			tc.want.Prices, _ = tc.m.PricesOf() // its list prices, if any
		}
		tc.want.Limits = limits(tc.m)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
		all, err := llmcall.Models(&cfg)
		if err != nil || !reflect.DeepEqual(all[tc.m.Name], got) {
			t.Errorf("%s: Models gives %+v (%v), FromConfig %+v", tc.name, all[tc.m.Name], err, got)
		}
	}
	cfg := config.Default()
	cfg.Providers = []config.ProviderConfig{openai, anthropic}
	m := config.ModelConfig{Name: "x", RequestsPerMinute: 10, TokensPerMinute: 1000} // two providers, none named
	cfg.Models = []config.ModelConfig{m}
	if _, err := llmcall.Models(&cfg); err == nil {
		t.Error("a model of no provider was mapped")
	}
}

// A model's first-byte limit is its own, else openai.first_byte_timeout,
// none for a reasoning model without its own, and none when it would not
// come before the call timeout.
func TestFirstByteOfModels(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		m    config.ModelConfig
		want time.Duration
	}{
		{"default", config.ModelConfig{Name: "a"}, 30 * time.Second},
		{"own", config.ModelConfig{Name: "a", FirstByteTimeout: config.Duration(5 * time.Second)}, 5 * time.Second},
		{"reasoning", config.ModelConfig{Name: "a", Reasoning: true}, 0},
		{"reasoning, own", config.ModelConfig{Name: "a", Reasoning: true, FirstByteTimeout: config.Duration(90 * time.Second)}, 90 * time.Second},
		{"past the call timeout", config.ModelConfig{Name: "a", FirstByteTimeout: config.Duration(3 * time.Minute)}, 0},
	} {
		cfg := config.Default()
		tc.m.RequestsPerMinute, tc.m.TokensPerMinute = 10, 1000
		cfg.Models = []config.ModelConfig{tc.m}
		got, err := llmcall.FromConfig(&cfg, tc.m)
		if err != nil {
			t.Fatal(err)
		}
		if got.FirstByte != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got.FirstByte, tc.want)
		}
	}
}
