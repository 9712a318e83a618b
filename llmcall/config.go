package llmcall

import "github.com/prq-dev/prq/internal/config"

// FromConfig is the configured model m as its provider p serves it, the
// one mapping the workers' and the gateway's wiring share: its prices
// (none: not priced), whether p counts cache reads toward m's limits
// (models[].cached_input_counts, by p's kind when unset), p's keys.
func FromConfig(m config.ModelConfig, p config.ProviderConfig) Model {
	prices, _ := m.PricesOf()
	return Model{Name: m.Name, Keys: max(len(p.Keys), 1), Prices: prices, CachedInputFree: !m.CachedInputCountsOr(p.Kind)}
}
