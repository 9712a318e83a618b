package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/baseline"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/workers"
)

// callRecord is one LLM call as a worker saw it.
type callRecord struct {
	Task    string `json:"task"`
	Kind    string `json:"kind"`
	Class   string `json:"class"`
	Tenant  int64  `json:"tenant"`
	Created int64  `json:"created"` // job planned, unix ms
	At      int64  `json:"at"`      // call started, unix ms
	Tokens  int64  `json:"tokens"`  // estimate
	Model   string `json:"model"`
	Outcome string `json:"outcome"`
}

// workerReport is what a bench worker process reports at exit.
type workerReport struct {
	HandlerRuns int64        `json:"handler_runs"` // LLM-task handler invocations
	PeakRSS     int64        `json:"peak_rss_bytes"`
	Calls       []callRecord `json:"calls"`
}

type taskMeta struct {
	kind, class string
	tenant      int64
	created     int64
	tokens      int64
}

// recorder wraps the worker's LLM client and handlers for the benchmark.
type recorder struct {
	mu    sync.Mutex
	meta  map[string]taskMeta
	calls []callRecord
	runs  atomic.Int64
	next  workers.LLM
}

func (r *recorder) handler(h asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		if jobs.IsLLM(t.Type()) {
			r.runs.Add(1)
			id, _ := asynq.GetTaskID(ctx)
			var m taskMeta
			switch t.Type() {
			case jobs.TypeChat:
				var c jobs.Chat
				if json.Unmarshal(t.Payload(), &c) == nil {
					m = taskMeta{kind: "chat", class: "chat", tenant: c.PR.Installation, created: c.Created, tokens: c.Estimate}
				}
			default:
				var f jobs.File
				if json.Unmarshal(t.Payload(), &f) == nil {
					m = taskMeta{kind: string(f.Kind), class: string(f.Tier), tenant: f.PR.Installation, created: f.Created, tokens: f.Estimate}
				}
			}
			r.mu.Lock()
			r.meta[id] = m
			r.mu.Unlock()
		}
		return h.ProcessTask(ctx, t)
	})
}

func (r *recorder) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	id, _ := asynq.GetTaskID(ctx)
	r.mu.Lock()
	m := r.meta[id]
	r.mu.Unlock()
	at := time.Now().UnixMilli()
	resp, err := r.next.Complete(ctx, req)
	outcome := "ok"
	switch {
	case errors.Is(err, llm.ErrRateLimited):
		outcome = "429"
	case err != nil:
		outcome = "error"
	}
	r.mu.Lock()
	r.calls = append(r.calls, callRecord{Task: id, Kind: m.kind, Class: m.class, Tenant: m.tenant, Created: m.created, At: at, Tokens: m.tokens, Model: req.Model, Outcome: outcome})
	r.mu.Unlock()
	return resp, err
}

// applyStrategy sets a process's gating: prq's admission, or a baseline.
func applyStrategy(a *app, strategy string, processes int) error {
	switch strategy {
	case "prq":
		return nil
	case baseline.Recipe, baseline.Wait, baseline.Naive:
	default:
		return &usageError{fmt.Sprintf("unknown strategy %q (want prq, %s, %s or %s)", strategy, baseline.Recipe, baseline.Wait, baseline.Naive)}
	}
	d := &baseline.Direct{Client: a.client}
	a.admitter, a.noAdmission = d, true
	a.retryDelay = func(n int, err error, t *asynq.Task) time.Duration {
		var ra *workers.RetryAfterError
		if errors.As(err, &ra) {
			return ra.After
		}
		return baseline.RetryDelay(n, err, t)
	}
	a.isFailure = func(err error) bool {
		var ra *workers.RetryAfterError
		return baseline.IsFailure(err) && !errors.As(err, &ra)
	}
	limits := map[string]ratelimit.Limits{}
	buckets := map[string]*ratelimit.Bucket{}
	for _, m := range a.sched.Models() {
		b, _ := a.sched.Bucket(m)
		limits[m] = b.Limits()
		buckets[m] = b
	}
	switch strategy {
	case baseline.Recipe:
		a.gate = baseline.NewLocalLimiter(limits, processes).Gate
	case baseline.Wait:
		d.Buckets = buckets
		a.gate = baseline.WaitGate(buckets)
	}
	return nil
}

// runBenchWorker is one worker OS process of `prq bench`.
func runBenchWorker(ctx context.Context, env *cmdEnv, args []string) error {
	var strategy, record string
	var processes int
	cfg, help, err := setup(env, "bench-worker", "A worker process of prq bench (internal).", modeWorker, args, func(fs *flag.FlagSet) {
		fs.StringVar(&strategy, "strategy", "prq", "prq, asynq-recipe, handler-wait or naive")
		fs.IntVar(&processes, "processes", 1, "worker processes in the run (the recipe splits limits by it)")
		fs.StringVar(&record, "record", "", "file for the report at exit")
	})
	if help || err != nil {
		return err
	}
	conn, err := parseRedisURL(cfg.RedisURL)
	if err != nil {
		return err
	}
	log := newLogger(env.stderr, cfg.Log)
	a, err := newApp(ctx, cfg, log, conn)
	if err != nil {
		return err
	}
	defer a.close()
	if err := applyStrategy(a, strategy, processes); err != nil {
		return err
	}
	rec := &recorder{meta: map[string]taskMeta{}}
	a.wrapLLM = func(l workers.LLM) workers.LLM { rec.next = l; return rec }
	a.wrapHandler = rec.handler
	err = a.run(ctx, env, running{worker: true}, nil)
	if record != "" {
		rec.mu.Lock()
		b, _ := json.Marshal(workerReport{HandlerRuns: rec.runs.Load(), PeakRSS: procStatusBytes("self", "VmHWM"), Calls: rec.calls})
		rec.mu.Unlock()
		if werr := os.WriteFile(record, b, 0o644); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}
