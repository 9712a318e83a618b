// Package admission is prq's admission scheduler: LLM jobs wait held in
// asynq (scheduled jobs.Hold in the future, under deterministic task ids)
// while their tickets wait here, in one global order per model, across
// every worker process. An admission loop in each worker takes tickets in
// that order while the model's shared bucket admits them — chat against
// batch by start-time fair queuing of the two classes, so chat goes first
// when it is rare yet takes at most Config.ChatCap of the tokens while
// batch waits (and keeps a share of the bucket batch may not use); fair
// queuing across tenants inside chat; batch past the aging bound ahead of
// everything but chat's share; then paid, trial and free by weight (or
// strictly); weighted fair queuing across tenants inside a tier; a bump
// for PRs further along — charges
// the bucket in the same Lua call, and releases the task
// (Inspector.RunTask), so asynq workers only ever dequeue admitted work.
// A notify ticket (NotifyQueue: the gateway's requests) waits in the same
// order but has no task: its admission is published to the caller waiting
// in-process (Waiter.Await), who reports back like a worker or withdraws.
//
// A model served by several API keys has a bucket per key (each with the
// model's limits, under the model's one hash tag): each admission is
// charged to the key with the most room among those not paused that
// admit it now (Admitted.Key); the job's call uses that key (KeyOf), and
// its start, settle and the provider's headers go to that key's bucket. A
// key with an account problem is paused alone (PauseKey).
//
// Each operation is one Lua script on a shared prelude, whose header
// says the layout; keyTable is the one table of the KEYS they read, in
// order; a reservation has one codec per language, both tested against
// the same golden cases, and a ticket is encoded in Go and decoded in
// both. A worker process heartbeats and lists its running jobs: a dead
// process's jobs go back through admission within seconds.
//
// It owns the order and the tickets. It does not run jobs or call the
// provider (the workers do, and report back through Started and Settle),
// and it does not own the bucket arithmetic (ratelimit's Lua library).
package admission
