// Package gateway is prq as an LLM gateway: OpenAI's chat completions,
// Responses and embeddings and Anthropic's Messages API (with
// count_tokens) for any agent, under virtual keys with exact token
// quotas, whose requests wait in the same global admission order as
// prq's own PR jobs and share the same model buckets.
//
// Per request, in order: authenticate the virtual key (bearer, or
// x-api-key); bound what reading, scanning and counting the body may
// cost by what the key could ever pay for, and refuse a body past it;
// parse it in its API's shape and count its input exactly, stopping past
// the budget; reserve the key's quota (llmcall's one reservation) with
// the output capped to what is left, waiting while the key's calls in
// flight hold it, refusing with 403 only a quota that is spent; wait for
// admission (the key is a tenant: its tier picks the class and weight)
// up to a deadline, then 429; forward to the model's provider in
// llmcall's steps, or to the model's fallbacks in turn through their own
// admission; answer in the client's API and settle the bucket and the
// quota with the real usage by llmcall's one rule.
//
// Each model (a Model: the configured llmcall.Model and its Provider)
// has its provider: OpenAI-compatible APIs and Azure OpenAI get chat
// completions and embeddings as they came; Anthropic gets the Messages
// API natively, and chat completions by translation. Responses, and
// Messages for OpenAI-kind models, are translated through a conversation
// to either wire and back, streams included. Every provider stream, of
// every API, is read by one loop (relay) with one idle limit, line cap
// and wording of an early end; every Anthropic stream by one reader and
// one stop-reason map (anthropicStreamIn, anthropicFinish).
//
// It owns the virtual keys (and their admin API), the request's path,
// each API's shapes and errors, a key's wait for its quota held by its
// own requests, and the per-key metrics. It does not own the order or
// the bucket (package admission), the call's protocol, the model's
// settings and the quota reservation (package llmcall), the quota
// arithmetic (ratelimit.Quota) nor the admission loops (they run in the
// worker processes).
package gateway
