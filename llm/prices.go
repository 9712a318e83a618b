package llm

import (
	"math"
	"strings"
)

// Prices are a model's list prices in US dollars per million tokens:
// input, input served from the provider's prompt cache, input written
// to the cache (Anthropic's 5-minute writes), and output. A zero
// CachedInput or CacheWrite is charged as Input.
type Prices struct {
	Input, CachedInput, CacheWrite, Output float64
}

// PricesAsOf dates the built-in list prices (ListPrices): the
// providers' pricing pages on that day.
const PricesAsOf = "2026-06-20"

// listPrices are the providers' published standard (synchronous) list
// prices, by model name prefix.
var listPrices = map[string]Prices{
	"gpt-4o":            {Input: 2.50, CachedInput: 1.25, Output: 10.00},
	"gpt-4o-mini":       {Input: 0.15, CachedInput: 0.075, Output: 0.60},
	"gpt-4.1":           {Input: 2.00, CachedInput: 0.50, Output: 8.00},
	"gpt-4.1-mini":      {Input: 0.40, CachedInput: 0.10, Output: 1.60},
	"gpt-4.1-nano":      {Input: 0.10, CachedInput: 0.025, Output: 0.40},
	"claude-opus-4":     {Input: 15.00, CachedInput: 1.50, CacheWrite: 18.75, Output: 75.00},
	"claude-opus-4-5":   {Input: 5.00, CachedInput: 0.50, CacheWrite: 6.25, Output: 25.00},
	"claude-sonnet-4":   {Input: 3.00, CachedInput: 0.30, CacheWrite: 3.75, Output: 15.00},
	"claude-3-7-sonnet": {Input: 3.00, CachedInput: 0.30, CacheWrite: 3.75, Output: 15.00},
	"claude-haiku-4-5":  {Input: 1.00, CachedInput: 0.10, CacheWrite: 1.25, Output: 5.00},
	"claude-3-5-haiku":  {Input: 0.80, CachedInput: 0.08, CacheWrite: 1.00, Output: 4.00},
}

// ListPrices returns the built-in list prices of a model, by the
// longest known prefix of its name ("gpt-4o-mini-2024-07-18" is
// gpt-4o-mini's); ok is false for a model prq knows no price of.
func ListPrices(model string) (p Prices, ok bool) {
	best := ""
	for prefix, pr := range listPrices {
		if strings.HasPrefix(model, prefix) && len(prefix) > len(best) {
			best, p = prefix, pr
		}
	}
	return p, best != ""
}

// Batch returns the prices of the providers' batch APIs: half the
// standard ones, cached input and cache writes included (OpenAI's Batch
// API; Anthropic's Message Batches, whose discount stacks with prompt
// caching).
func (p Prices) Batch() Prices {
	return Prices{Input: p.Input / 2, CachedInput: p.CachedInput / 2, CacheWrite: p.CacheWrite / 2, Output: p.Output / 2}
}

// Flex returns the prices of OpenAI's flex processing: batch prices.
func (p Prices) Flex() Prices { return p.Batch() }

// Of returns the prices of the tier that served r: Flex when the
// provider says flex did.
func (p Prices) Of(r Response) Prices {
	if r.ServiceTier == ServiceTierFlex {
		return p.Flex()
	}
	return p
}

// Zero reports prices that price nothing (a model without a price).
func (p Prices) Zero() bool { return p == Prices{} }

// Valid reports prices that are all finite and not negative.
func (p Prices) Valid() bool {
	for _, v := range []float64{p.Input, p.CachedInput, p.CacheWrite, p.Output} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}

// Cost is what a call's usage costs at these prices, in dollars: the
// uncached input at Input, the cached at CachedInput, the cache writes
// at CacheWrite, the output at Output.
func (p Prices) Cost(r Response) float64 {
	cached, written := max(r.CachedTokens, 0), max(r.CacheWriteTokens, 0)
	plain := max(r.PromptTokens-cached-written, 0)
	cachedPrice, writePrice := p.CachedInput, p.CacheWrite
	if cachedPrice == 0 {
		cachedPrice = p.Input
	}
	if writePrice == 0 {
		writePrice = p.Input
	}
	return (float64(plain)*p.Input + float64(cached)*cachedPrice + float64(written)*writePrice + float64(max(r.OutputTokens, 0))*p.Output) / 1e6
}
