// Package gateway is prq as an LLM gateway: an OpenAI-compatible
// endpoint (POST /v1/chat/completions, streaming or not, and GET
// /v1/models) for any agent, under virtual keys with exact token quotas,
// whose requests wait in the same global admission order as prq's own
// PR jobs and share the same model buckets.
//
// Per request, in order: authenticate the virtual key; count the input
// tokens exactly; reserve the key's quota with the output capped to what
// is left (max_tokens lowered), refusing with 403 and nothing sent when
// the input plus a minimum output no longer fits; wait for admission (the
// key is a tenant: its tier picks the class and weight) up to a deadline,
// then 429; forward to the model's provider; settle the bucket and the
// quota with the real usage.
//
// Each model has its provider (provider.go): OpenAI-compatible APIs get
// the request as it came; Azure OpenAI the same body on its deployment's
// path with api-version and an api-key header; Anthropic a translation
// to its Messages API, whose reply is translated back (anthropic.go).
//
// Files: keys.go (virtual keys in Redis), api.go (their admin API),
// gateway.go (the endpoint), provider.go (where and how a model's calls
// go), upstream.go (the provider call and the stream), anthropic.go (the
// Messages API translation), metrics.go (series per key).
//
// It owns the keys and the request's path. It does not own the order or
// the bucket (package admission), the quota arithmetic (ratelimit.Quota)
// nor the admission loops (they run in the worker processes).
package gateway
