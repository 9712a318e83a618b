package workers

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// RunStore is what the run reconciler reads and marks (a *store.Store).
type RunStore interface {
	ActiveRunsFrom(ctx context.Context, start, limit int64) ([]store.Run, error)
	MarkStuck(ctx context.Context, pr jobs.PR, head string) (first bool, err error)
}

var _ RunStore = (*store.Store)(nil)

// RunReconcilerConfig configures a RunReconciler.
type RunReconcilerConfig struct {
	// Store lists the runs in progress. Required.
	Store RunStore
	// Queue enqueues the finalize jobs found missing. Required.
	Queue TaskQueue
	// Grace is how long a run may stay with every file done before its
	// finalize counts as lost (the last file's job enqueues it right
	// after recording its result). Defaults to 1m.
	Grace time.Duration
	// StuckAfter bounds a run's life: a run still running this long after
	// it was planned is surfaced and finalized with what it has (files
	// without a result are shown as failed). Defaults to 26h: the batch
	// retry budget's age (24h) and some. A run whose job waits for its
	// tenant's quota to reset counts from the reset instead.
	StuckAfter time.Duration
	// CountFunc, when set, counts what the reconciler did
	// (prq_lifecycle_total): run_finalized and run_stuck, with a reason.
	CountFunc func(event, reason string)
	// NowFunc is the clock. Defaults to time.Now.
	NowFunc func() time.Time
	// Log defaults to discarding.
	Log *slog.Logger
}

// RunReconciler repairs what a crash, or a failed enqueue, leaves
// between a run's last result and its publication: it finalizes runs
// whose files are all done but which nobody finalizes, and surfaces runs
// stuck past a bound. Many processes may run it at once: a finalize job
// has one id per head, and a stuck run is marked once.
type RunReconciler struct{ cfg RunReconcilerConfig }

// NewRunReconciler returns a RunReconciler.
func NewRunReconciler(cfg RunReconcilerConfig) (*RunReconciler, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("workers: run reconciler: Store is required")
	case cfg.Queue == nil:
		return nil, errors.New("workers: run reconciler: Queue is required")
	case cfg.Grace < 0 || cfg.StuckAfter < 0:
		return nil, errors.New("workers: run reconciler: Grace and StuckAfter must not be negative")
	}
	if cfg.Grace == 0 {
		cfg.Grace = time.Minute
	}
	if cfg.StuckAfter == 0 {
		cfg.StuckAfter = 26 * time.Hour
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	cfg.Log = logOrDiscard(cfg.Log)
	return &RunReconciler{cfg: cfg}, nil
}

// Reconciled is what one pass did.
type Reconciled struct {
	// Finalized counts runs whose lost finalize job was enqueued again.
	Finalized int
	// Stuck counts runs surfaced for running past StuckAfter.
	Stuck int
}

// Reconcile makes one pass over the runs in progress.
func (r *RunReconciler) Reconcile(ctx context.Context) (Reconciled, error) {
	cfg, log := &r.cfg, r.cfg.Log
	var out Reconciled
	now := cfg.NowFunc()
	const page = 500
	for start := int64(0); ; start += page {
		runs, err := cfg.Store.ActiveRunsFrom(ctx, start, page)
		if err != nil {
			return out, err
		}
		for _, run := range runs {
			if run.State != store.StateRunning || run.Head == "" {
				continue
			}
			f := jobs.Finalize{PR: run.PR, HeadSHA: run.Head, Tier: run.Tier, Run: run.CreatedAt.UnixMilli()}
			age := now.Sub(run.CreatedAt)
			if run.AllDone() {
				doneAt := run.DoneAt
				if doneAt.IsZero() {
					doneAt = run.CreatedAt // nothing to review: the plan enqueues finalize
				}
				if now.Sub(doneAt) < cfg.Grace {
					continue
				}
				created, err := enqueueFinalizeNew(ctx, cfg.Queue, f)
				if err != nil {
					return out, err
				}
				if created {
					out.Finalized++
					r.count("run_finalized", "all_done")
					log.WarnContext(ctx, "run had every file done but no finalize; finalizing it", "pr", run.PR.String(), "head", short(run.Head), "done_for", now.Sub(doneAt).Round(time.Second))
					continue
				}
				// its finalize exists: running, retrying or archived
				if age >= cfg.StuckAfter {
					if first, err := cfg.Store.MarkStuck(ctx, run.PR, run.Head); err != nil {
						return out, err
					} else if first {
						out.Stuck++
						r.count("run_stuck", "finalize")
						log.ErrorContext(ctx, "run stuck: its finalize job has not published past the bound (see the archived pr:finalize task)", "pr", run.PR.String(), "head", short(run.Head), "age", age.Round(time.Second))
					}
				}
				continue
			}
			if !run.WaitingUntil.IsZero() && run.WaitingUntil.After(run.CreatedAt) {
				// a job waits for the tenant's quota: the bound counts from its reset
				age = now.Sub(run.WaitingUntil)
			}
			if age < cfg.StuckAfter {
				continue
			}
			first, err := cfg.Store.MarkStuck(ctx, run.PR, run.Head)
			if err != nil {
				return out, err
			}
			if !first {
				continue
			}
			out.Stuck++
			r.count("run_stuck", "files")
			log.ErrorContext(ctx, "run stuck: files without a result past the bound; publishing what it has (those files are shown as failed)", "pr", run.PR.String(), "head", short(run.Head), "age", age.Round(time.Second),
				"summaries", run.SummaryDone, "of_summaries", run.SummaryTotal, "reviews", run.ReviewDone, "of_reviews", run.ReviewTotal)
			if _, err := enqueueFinalizeNew(ctx, cfg.Queue, f); err != nil {
				return out, err
			}
		}
		if len(runs) < page {
			return out, nil
		}
	}
}

// Run reconciles every period until ctx ends.
func (r *RunReconciler) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := r.Reconcile(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Log.WarnContext(ctx, "run reconcile failed", "err", err)
		}
	}
}

func (r *RunReconciler) count(event, reason string) {
	if r.cfg.CountFunc != nil {
		r.cfg.CountFunc(event, reason)
	}
}
