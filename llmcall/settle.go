package llmcall

import (
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
)

// Cost lanes: the lane label of prq_llm_cost_dollars_total.
const (
	// LaneSync is a call made on the provider's ordinary, synchronous
	// API at its standard price.
	LaneSync = "sync"
	// LaneFlex is a call served by OpenAI's flex processing.
	LaneFlex = "flex"
	// LaneBatch is a call answered through a provider's batch API.
	LaneBatch = "batch"
)

// Settlement is what a finished call settles: the bucket, the tenant's
// quotas, and its price.
type Settlement struct {
	// Bucket is what the model's bucket keeps of the call.
	Bucket ratelimit.Cost
	// Tokens and Nano are what the tenant's quotas keep of their
	// reservations, in tokens and nano-dollars; InFull: all of them.
	Tokens, Nano int64
	InFull       bool
	// Dollars is what the call cost (0: unpriced or unbilled), in Lane.
	Dollars float64
	Lane    string
}

// Usage is what a call's usage counts toward its model's limits: all of
// it, but the input read from the prompt cache where the provider does
// not count that (CachedInputFree). The one cached-input rule.
func (m Model) Usage(r llm.Response) ratelimit.Cost {
	in, out := max(r.PromptTokens, 0), max(r.OutputTokens, 0)
	if m.CachedInputFree {
		in = max(in-max(r.CachedTokens, 0), 0)
	}
	return ratelimit.Cost{Requests: 1, Tokens: in + out, Input: in, Output: out}
}

// Settle is the one settle rule. r is the provider's usage (nil: not
// known), est the tokens admission charged the call, batch whether it
// was answered by a batch API (priced at batch prices).
//
//   - OK with usage: the bucket keeps the usage (Usage), the quotas the
//     tokens and the cost at the prices of the lane that served it.
//   - OK without usage, and Transient: the provider may have run it;
//     the bucket keeps the estimate, the quotas all they reserved.
//   - RateLimited, ContextLength, Permanent: the provider counted the
//     request and generated nothing; the bucket keeps the estimate, the
//     quotas nothing.
//   - FlexRefused, AccountModel, AccountKey: the provider refused the
//     call before counting it; all is given back.
func (m Model) Settle(o Outcome, r *llm.Response, est int64, batch bool) Settlement {
	kept := ratelimit.Cost{Requests: 1, Tokens: est}
	switch o {
	case OK:
		if r == nil {
			return Settlement{Bucket: kept, InFull: true}
		}
		prices, lane := m.Prices.Of(*r), LaneSync
		switch {
		case batch:
			prices, lane = m.Prices.Batch(), LaneBatch
		case r.ServiceTier == llm.ServiceTierFlex:
			lane = LaneFlex
		}
		d := prices.Cost(*r)
		return Settlement{Bucket: m.Usage(*r), Tokens: r.PromptTokens + r.OutputTokens, Nano: ratelimit.NanoCost(d), Dollars: d, Lane: lane}
	case Transient:
		return Settlement{Bucket: kept, InFull: true}
	case FlexRefused, AccountModel, AccountKey:
		return Settlement{}
	}
	return Settlement{Bucket: kept}
}
