// Package gateway is prq as an LLM gateway: OpenAI's chat completions,
// Responses and embeddings and Anthropic's Messages API (with
// count_tokens) for any agent, under virtual keys with exact token
// quotas, whose requests wait in the same global admission order as
// prq's own PR jobs and share the same model buckets.
//
// Per request, in order (exchange.go): authenticate the virtual key
// (bearer, or x-api-key); bound what reading, scanning and counting the
// body may cost by what the key could ever pay for, and refuse a body
// past it (front.go, scan.go); parse it in its API's shape and count its
// input exactly, stopping past the budget (count.go); reserve the key's
// quota with the output capped to what is left, waiting while the key's
// calls in flight hold it, refusing with 403 only a quota that is spent
// (quota.go, held.go); wait for admission (the key is a tenant: its tier
// picks the class and weight) up to a deadline, then 429; forward to the
// model's provider, or to the model's fallbacks in turn through their
// own admission (fallback.go); answer in the client's API and settle the
// bucket and the quota with the real usage.
//
// Each model has its provider (provider.go): OpenAI-compatible APIs and
// Azure OpenAI get chat completions and embeddings as they came;
// Anthropic gets the Messages API natively, and chat completions by
// translation (anthropic.go). Responses, and Messages for OpenAI-kind
// models, are translated through a conversation (conv.go) to either
// wire and back, streams included (pump.go). Every provider stream, of
// every API, is read by one loop (relay, pump.go) with one idle limit,
// line cap and wording of an early end; every Anthropic stream by one
// reader and one stop-reason map (anthropicStreamIn, anthropicFinish in
// conv.go).
//
// Files: keys.go (virtual keys in Redis), api.go (their admin API),
// gateway.go (routes, admission, headers), chat.go, embeddings.go,
// responses.go, messages.go (the APIs), upstream.go (the provider call
// and the chat stream), metrics.go (series per key), errors.go (errors
// in each API's shape).
//
// It owns the keys and the request's path. It does not own the order or
// the bucket (package admission), the quota arithmetic (ratelimit.Quota)
// nor the admission loops (they run in the worker processes).
package gateway
