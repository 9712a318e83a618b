// Package workers runs prq's jobs, one type per job kind:
//
//   - [Planner] (pr:plan) turns a PR event into per-file jobs: it lists
//     the files on GitHub, filters them, records the run, supersedes the
//     previous head's work and submits the jobs through admission.
//   - [FileWorker] (file:summary, file:review) summarises or reviews one
//     file with the LLM and records the result exactly once.
//   - [ChatResponder] (chat:reply) answers a comment that talks to the bot.
//   - [Finalizer] (pr:finalize) publishes a head's results to GitHub
//     exactly once: a summary comment and a review.
//
// [Caller] is the one LLM call the file worker and the chat responder
// share: under the tenant's quota, settling what it really used, and
// back to admission (never around it) when the call must run again; the
// call's protocol, the model's settings ([Model] is the configured
// llmcall.Model and the kinds of job it serves) and the quota
// reservation are package llmcall's, shared with the gateway.
// [Enqueuer] is what the webhook receiver hands work to; it stands alone
// so a serve process builds no handlers. [Set] composes the four
// handlers for a worker process and registers them on an asynq mux.
//
// Every retry has a budget ([RetryBudget], per class: batch and chat):
// attempts, counted in Redis by [Attempts] because asynq counts only
// failures, and age since the job was planned. A provider that keeps
// answering 429 or refusing the account, or a GitHub that keeps rate
// limiting, ends the job with a recorded reason once it is spent.
//
// Each type declares, where it is used, the few methods it needs of the
// store, admission, GitHub and the LLM; *store.Store, *admission.Scheduler
// and *ghapp.Client satisfy them (GitHub through [Installations]).
//
// workers does not receive webhooks (package webhook), decide the order
// or the rate of LLM calls (packages admission and ratelimit), own an
// admitted call's steps or the quota reservation (package llmcall), speak
// GitHub's or the provider's HTTP (packages ghapp and llm), or keep state
// of its own beyond the pacer's turns and the attempt counts: runs,
// results and drafts live in package store.
package workers
