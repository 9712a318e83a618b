package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/prq-dev/prq/admission"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/internal/bench/baseline"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/harness"
	"github.com/prq-dev/prq/internal/logging"
	"github.com/prq-dev/prq/internal/server"
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
	Start   int64  `json:"start"`   // handler started, unix ms
	At      int64  `json:"at"`      // call started, unix ms
	Tokens  int64  `json:"tokens"`  // estimate
	// Admitted is when admission admitted the job, unix ms (0: not
	// recorded; a baseline has no admission)
	Admitted int64  `json:"admitted,omitempty"`
	Model    string `json:"model"`
	Outcome  string `json:"outcome"`
	// Margin is the window margin the process held at the call, µs (0:
	// none, a token bucket)
	Margin int64 `json:"margin_us,omitempty"`
	// Done is when the call returned, unix ms; Way bounds the call's way
	// to the provider, µs (from its call to its return less the
	// provider's processing time; 0: no reply, or no processing time).
	Done int64 `json:"done,omitempty"`
	Way  int64 `json:"way_us,omitempty"`
	// Comment is a chat's comment id (0: not a chat).
	Comment int64 `json:"comment,omitempty"`
}

// workerReport is what a bench worker process reports at exit.
type workerReport struct {
	HandlerRuns int64        `json:"handler_runs"` // LLM-task handler invocations
	PeakRSS     int64        `json:"peak_rss_bytes"`
	Calls       []callRecord `json:"calls"`
	// Admitted: when this process's admission loop admitted each task
	// (by task id, unix ms); the bench joins them to the calls.
	Admitted map[string]int64 `json:"admitted,omitempty"`
	// Tally (--tally): what this process sent Redis, per step; Waits:
	// each admission this process made, with how long its ticket waited.
	Tally []tallyRow  `json:"tally,omitempty"`
	Waits []admitWait `json:"admit_waits,omitempty"`
}

// admitWait is one admission: when (unix ms, this machine's clock) and
// how long the ticket waited from its registration (µs, Redis's clock).
type admitWait struct {
	At     int64  `json:"at"`
	WaitUS int64  `json:"wait_us"`
	Model  string `json:"model"`
}

type taskMeta struct {
	kind, class string
	tenant      int64
	created     int64
	tokens      int64
	start       int64
	comment     int64 // a chat's comment id
}

// recorder wraps the worker's LLM client and handlers for the benchmark.
type recorder struct {
	mu    sync.Mutex
	meta  map[string]taskMeta
	calls []callRecord
	runs  atomic.Int64
	// margin is a model's window margin in this process now
	margin func(model string) time.Duration
	next   workers.LLM
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
					m = taskMeta{kind: "chat", class: "chat", tenant: c.PR.Installation, created: c.Created, tokens: c.Estimate, comment: c.CommentID}
				}
			default:
				var f jobs.File
				if json.Unmarshal(t.Payload(), &f) == nil {
					m = taskMeta{kind: string(f.Kind), class: string(f.Tier), tenant: f.PR.Installation, created: f.Created, tokens: f.Estimate}
				}
			}
			m.start = time.Now().UnixMilli()
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
	done := time.Now()
	var way int64
	if p, ok := ratelimit.ProcessingTime(resp.Header); ok && err == nil {
		way = max(done.Sub(time.UnixMilli(at))-p, time.Microsecond).Microseconds()
	}
	r.mu.Lock()
	var margin int64
	if r.margin != nil {
		margin = r.margin(req.Model).Microseconds()
	}
	r.calls = append(r.calls, callRecord{Task: id, Kind: m.kind, Class: m.class, Tenant: m.tenant, Created: m.created, Start: m.start, At: at, Tokens: m.tokens, Model: req.Model, Outcome: outcome, Margin: margin,
		Done: done.UnixMilli(), Way: way, Comment: m.comment})
	r.mu.Unlock()
	return resp, err
}

// strategyOptions are a process's options under a strategy: none for
// prq's admission, or a baseline's gating.
func strategyOptions(s *server.Server, strategy string, processes int) (server.Options, error) {
	var o server.Options
	switch strategy {
	case StrategyPrq, StrategyPrqWindow, StrategyPrqAuto, StrategyPrqDebt, StrategyPrqLanes:
		return o, nil
	case baseline.Recipe, baseline.Wait, baseline.Naive:
	default:
		return o, &config.UsageError{Msg: fmt.Sprintf("unknown strategy %q (want %s, %s, %s, %s, %s, %s, %s or %s)", strategy, StrategyPrq, StrategyPrqWindow, StrategyPrqAuto, StrategyPrqDebt, StrategyPrqLanes, baseline.Recipe, baseline.Wait, baseline.Naive)}
	}
	d := &baseline.Direct{Client: s.Client()}
	o.Admitter, o.NoAdmission = d, true
	o.RetryDelay = func(n int, err error, t *asynq.Task) time.Duration {
		var ra *workers.RetryAfterError
		if errors.As(err, &ra) {
			return ra.After
		}
		return baseline.RetryDelay(n, err, t)
	}
	o.IsFailure = func(err error) bool {
		var ra *workers.RetryAfterError
		return baseline.IsFailure(err) && !errors.As(err, &ra)
	}
	limits := map[string]ratelimit.Limits{}
	buckets := map[string]*ratelimit.Bucket{}
	for _, m := range s.Scheduler().Models() {
		b, _ := s.Scheduler().Bucket(m)
		limits[m] = b.Limits()
		buckets[m] = b
	}
	switch strategy {
	case baseline.Recipe:
		o.Gate = baseline.NewLocalLimiter(limits, processes).Gate
	case baseline.Wait:
		d.Buckets = buckets
		o.Gate = baseline.WaitGate(buckets)
	}
	return o, nil
}

// WorkerFlags are a bench worker's settings.
type WorkerFlags struct {
	Strategy, Record string
	Processes        int
	// Upstream is UpstreamFake (the configured provider) or UpstreamNoop
	// (a no-op provider in this process); Tally records Redis commands,
	// script calls and admission waits for the ceiling workload.
	Upstream string
	Tally    bool
}

// Register adds the bench worker's flags to fs.
func (w *WorkerFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&w.Strategy, "strategy", StrategyPrq, "prq, prq-window, prq-auto, prq-debt, prq-lanes, asynq-recipe, handler-wait or naive")
	fs.IntVar(&w.Processes, "processes", 1, "worker processes in the run (the recipe splits limits by it)")
	fs.StringVar(&w.Record, "record", "", "file for the report at exit")
	fs.StringVar(&w.Upstream, "upstream", UpstreamFake, "fake (the configured provider) or noop (a no-op provider inside this process)")
	fs.BoolVar(&w.Tally, "tally", false, "record Redis commands, script calls and admission waits in the report")
}

// RunWorker is one worker OS process of `prq bench`: it runs jobs under
// the strategy until ctx ends, then writes what it recorded.
func RunWorker(ctx context.Context, cfg *config.Config, wf WorkerFlags, stdout, stderr io.Writer) error {
	conn, err := config.ParseRedisURL(cfg.RedisURL)
	if err != nil {
		return err
	}
	log := logging.New(stderr, cfg.Log)
	var tally *redisTally
	if wf.Tally {
		tally = newRedisTally(newScriptNamer())
	}
	switch wf.Upstream {
	case UpstreamFake, "":
	case UpstreamNoop:
		h := &cpuMeter{next: &noopProvider{}}
		if tally != nil {
			h.onUsed = func(d time.Duration) { tally.add("cpu", "upstream", int64(d)) }
		}
		url, stop, err := harness.ListenServe(h)
		if err != nil {
			return err
		}
		defer stop()
		cfg.OpenAI.BaseURL = url + "/v1"
	default:
		return &config.UsageError{Msg: fmt.Sprintf("--upstream must be %s or %s, got %q", UpstreamFake, UpstreamNoop, wf.Upstream)}
	}
	s, err := server.New(ctx, cfg, log, conn)
	if err != nil {
		return err
	}
	defer s.Close()
	if tally != nil {
		s.Redis().AddHook(tally) // after the dispatch gate: what reaches Redis
	}
	opts, err := strategyOptions(s, wf.Strategy, wf.Processes)
	if err != nil {
		return err
	}
	rec := &recorder{meta: map[string]taskMeta{}, margin: func(model string) time.Duration {
		if sc := s.Scheduler(); sc != nil {
			if b, ok := sc.Bucket(model); ok {
				return b.WindowMargin()
			}
		}
		return 0
	}}
	opts.WrapLLM = func(l workers.LLM) workers.LLM { rec.next = l; return rec }
	opts.WrapHandler = rec.handler
	admitted := map[string]int64{}
	var waits []admitWait
	opts.OnAdmit = func(a admission.Admitted) {
		rec.mu.Lock()
		admitted[a.ID] = a.Enqueued.Add(a.Waited).UnixMilli()
		if tally != nil {
			waits = append(waits, admitWait{At: time.Now().UnixMilli(), WaitUS: a.Waited.Microseconds(), Model: a.Model})
		}
		rec.mu.Unlock()
	}
	err = s.Run(ctx, stdout, server.Roles{Worker: true}, opts)
	if wf.Record != "" {
		rec.mu.Lock()
		wr := workerReport{HandlerRuns: rec.runs.Load(), PeakRSS: harness.ProcStatusBytes("self", "VmHWM"), Calls: rec.calls, Admitted: admitted, Waits: waits}
		if tally != nil {
			wr.Tally = tally.rows()
		}
		b, _ := json.Marshal(wr)
		rec.mu.Unlock()
		if werr := os.WriteFile(wf.Record, b, 0o644); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}
