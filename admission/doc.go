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
// Files: admission.go (the scheduler and its calls), scripts.go and
// lua/ (one Lua script per operation, on the shared lua/prelude.lua,
// lua/reservation.lua, lua/memo.lua and lua/order.lua; the prelude's
// header says the layout), keys.go (the Redis keys of a model and
// keyTable, their order in KEYS), reservation.go and lua/reservation.lua
// (a reservation's codec, Go's and Lua's), ticket.go and lua/ticket.lua (the
// ticket and its stored
// form, encoded in Go and decoded in both Go and Lua), loop.go (the
// admission loop), reconcile.go (crash repair), notify.go (notify
// tickets and their waiters), process.go and lua/process.lua (worker
// processes' heartbeats and running jobs; a dead process's jobs go back
// through admission within seconds), lua/release.lua (admitted tasks
// moved to asynq's pending list, one script a queue), pause.go and
// stats.go.
//
// It owns the order and the tickets. It does not run jobs or call the
// provider (the workers do, and report back through Started and Settle),
// and it does not own the bucket arithmetic (ratelimit's Lua library).
package admission
