// Package ratelimit keeps an LLM provider at its limits and tenants within
// their quotas, exactly, across any number of processes.
//
// A Bucket holds one model and API key's shared limits (requests and
// tokens per period, optionally per day) in Redis. Every decision is one
// Lua script that reads Redis TIME in integer microseconds, refills
// continuously, and admits a cost in every dimension at once or not at
// all, returning the exact wait until it would fit. Reservations are
// idempotent per job id and settled once with actual usage.
//
// A Bucket's Limits.Limiter says how the provider counts: LimiterBucket
// refills continuously (OpenAI's documented behaviour); LimiterWindow
// admits at most the limit in any sliding window, optionally also capping
// a shorter sub-window, as many gateways do. The window sums admissions in
// slots of the bucket's own hash, so a decision stays one atomic script
// of bounded cost. Sync learns from the provider's x-ratelimit-* headers:
// it lowers the limiter to what the provider reports, and flags a
// provider whose reset times only a window explains (WindowSuspected);
// LimiterAuto is a bucket until that evidence, then a window (Counting),
// switched in the state itself so every process counts alike.
//
// A Quota holds a tenant's token allowance for a calendar window. It never
// overshoots: a call reserves its exact input tokens plus an output cap
// equal to what is left, so the caller rewrites the request's max output
// tokens to that cap; concurrent calls of one tenant reserve atomically.
//
// Every key one decision touches shares one hash tag, so both work on
// Redis Cluster. The package does not queue or order work; that is the
// admission scheduler's job, which charges buckets through LuaLibrary in
// the same atomic step that picks a job.
package ratelimit
