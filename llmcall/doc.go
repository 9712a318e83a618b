// Package llmcall owns the protocol of one admitted LLM call, the same
// for the workers' jobs and the gateway's requests: the configured model
// (Model, built once from the configuration by FromConfig), which of the
// model's keys the call uses, telling admission when it is sent and, with
// its settle, when it arrived, syncing the key's bucket with the provider's headers, the
// tenant's quota reservation (ReserveQuota: tokens and dollars, the
// output cap cut to what they leave), what a reply or a failure settles
// (the bucket, the quota, the price and the lane), how a provider's
// failure reads as an Outcome, and the pause an account problem earns.
//
// A call runs in explicit steps:
//
//	p := llmcall.New(adm, log, pause)                // once: the admission, the account pause
//	h, err := llmcall.ReserveQuota(ctx, quotas, ask) // the tenant's quotas (a *QuotaShort: spent)
//	c := p.Begin(ctx, model, ticket)                 // begin: the key admission charged
//	rctx := c.Calling(ctx, ctx)                      // the charge moves to the call; its write is traced
//	...                                              // the provider's client sends it with rctx, h.Cap its output cap
//	c.Observe(ctx, status, header)                   // observe: way, arrival, the key's bucket synced
//	o := c.Resolve(ctx, llmcall.OutcomeOf(err), err) // an account problem pauses the key or the model
//	st := model.Settle(o, usage, estimate, batch)    // settle: the one rule
//	c.Settle(ctx, st.Bucket)                         // the bucket, with the call's way observed
//	llmcall.SettleQuotas(ctx, quotas, h, st)         // the quotas; st also says the price and the lane
//
// The workers' Caller runs these around package llm's client, with
// Observe and Settle as one ObserveSettle after Resolve (the key's
// bucket is lowered to the provider's headers in admission's settle
// script; a 429 still empties it at once); the gateway runs them around
// its relay of the raw reply, read with ReplyOutcome, and syncs at the
// reply's headers (a stream settles at its end).
//
// It does not own admission (the order, the buckets' scripts: package
// admission and ratelimit), the quotas' counters (ratelimit.Quota), the
// provider's client (package llm, or the gateway's relay of the raw
// reply), the configuration's parsing and validation (internal/config),
// who a tenant is and which quotas it has (the workers' tiers, the
// gateway's keys), a gateway key's wait for its quota held by its other
// requests, nor what a job or a request does with its outcome (a retry,
// a fallback, an answer).
package llmcall
