// Package server wires one prq process and runs it: it opens Redis
// (refusing one that may evict keys or has no persistence), builds the
// store, the admission scheduler, the job workers and the asynq server,
// client and inspector, mounts the HTTP surface (webhook, health, metrics,
// dashboard, admin API, asynq web UI) with its guards (token auth,
// same-origin checks on every state change, a read-only asynq UI unless
// admin.ui_writes, security headers on every response) and runs serve,
// worker or both until the context ends, then shuts down in order. It
// also mounts the LLM gateway (internal/gateway) on serve, and runs it
// alone for prq gateway.
//
// It owns the wiring and the shutdown order, not the parts it wires:
// configuration lives in internal/config, the pages in internal/dashboard,
// the series in internal/metrics. The benchmark's hooks come in as Options;
// production passes none.
package server
