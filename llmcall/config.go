package llmcall

import (
	"time"

	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/llm"
)

// FromConfig is the configured model m as its provider serves it: the
// one mapping from a model's settings, which the workers' and the
// gateway's wiring share. A model of no configured provider, or whose
// limits do not hold, is refused (Validate names both first).
func FromConfig(cfg *config.Config, m config.ModelConfig) (Model, error) {
	p, ok := cfg.ProviderOf(m.Name)
	if !ok {
		return Model{}, &config.SettingError{Name: "models." + m.Name + ".provider", Problem: "names no configured provider"}
	}
	limits, err := m.Limits()
	if err != nil {
		return Model{}, &config.SettingError{Name: "models." + m.Name, Problem: err.Error()}
	}
	prices, _ := m.PricesOf()
	out := Model{Name: m.Name, Keys: len(p.KeyValues()), Prices: prices, CachedInputFree: !m.CachedInputCountsOr(p.Kind),
		MaxOutput: m.MaxOutputTokens, ContextTokens: m.ContextTokens, Reasoning: m.Reasoning, Fallbacks: m.Fallbacks,
		Flex: m.Flex, Batch: m.Batch, FirstByte: firstByte(cfg, m), Output: llm.FormatType(m.OutputFormat),
		SchemaIsInput: p.Kind == config.KindAnthropic, Limits: &limits}
	if p.Kind == config.KindAzure {
		out.Deployment = p.Deployment(m.Name)
	}
	return out, nil
}

// Models are the configured models by name, each mapped by FromConfig.
func Models(cfg *config.Config) (map[string]Model, error) {
	out := make(map[string]Model, len(cfg.Models))
	for _, m := range cfg.Models {
		mm, err := FromConfig(cfg, m)
		if err != nil {
			return nil, err
		}
		out[m.Name] = mm
	}
	return out, nil
}

// firstByte is a model's first-byte limit: its own, else
// openai.first_byte_timeout but for a reasoning model (which thinks
// before its first byte); none when it would not come before the call's
// timeout anyway.
func firstByte(cfg *config.Config, m config.ModelConfig) time.Duration {
	d := m.FirstByteTimeout.D()
	if d == 0 && !m.Reasoning {
		d = cfg.OpenAI.FirstByteTimeout.D()
	}
	if d >= cfg.OpenAI.Timeout.D() {
		return 0
	}
	return d
}
