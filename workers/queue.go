package workers

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// Positions tells where tickets stand in admission's order (an
// *admission.Scheduler).
type Positions interface {
	Position(ctx context.Context, model string, ids []string) (admission.Position, error)
	Models() []string
}

// QueueStore lists the runs in progress and their jobs (a *store.Store).
type QueueStore interface {
	ActiveRunsFrom(ctx context.Context, start, limit int64) ([]store.Run, error)
	TaskIDs(ctx context.Context, pr jobs.PR, head string) ([]string, error)
}

var (
	_ Positions  = (*admission.Scheduler)(nil)
	_ QueueStore = (*store.Store)(nil)
)

// QueueReporterConfig configures a QueueReporter.
type QueueReporterConfig struct {
	// Store lists the runs in progress. Required.
	Store QueueStore
	// Positions reads where their jobs stand. Required.
	Positions Positions
	// Checks writes the check runs; nil: positions are only answered
	// (`status`), never shown.
	Checks *Checks
	// Every is the time between passes, and the least time between two
	// writes of one head's position, across processes. Defaults to 30s.
	Every time.Duration
	// MaxHeads bounds the heads one pass looks at. Defaults to 2000.
	MaxHeads int
	// NowFunc is the clock. Defaults to time.Now.
	NowFunc func() time.Time
	// Log defaults to discarding.
	Log *slog.Logger
}

// QueueReporter shows people where a waiting pull request stands: while
// no job of a head has left the line, its check run says how many jobs
// are ahead of its first file in admission's order, in which tier, and
// when that file should start at the measured admission rate ("Waiting:
// 37 jobs ahead in paid; about 4 min"), refreshed every Every. Many
// processes may run it at once: a head's writes are paced across them.
type QueueReporter struct{ cfg QueueReporterConfig }

// NewQueueReporter returns a QueueReporter.
func NewQueueReporter(cfg QueueReporterConfig) (*QueueReporter, error) {
	switch {
	case cfg.Store == nil || cfg.Positions == nil:
		return nil, errors.New("workers: queue reporter: Store and Positions are required")
	case cfg.Every < 0 || cfg.MaxHeads < 0:
		return nil, errors.New("workers: queue reporter: Every and MaxHeads must not be negative")
	}
	if cfg.Every == 0 {
		cfg.Every = 30 * time.Second
	}
	if cfg.MaxHeads == 0 {
		cfg.MaxHeads = 2000
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	cfg.Log = logOrDiscard(cfg.Log)
	return &QueueReporter{cfg: cfg}, nil
}

// Where returns where a head stands while every one of its jobs waits
// in line (waiting=false once one has left it, or when nothing of it is
// known to admission).
func (q *QueueReporter) Where(ctx context.Context, run store.Run) (p admission.Position, waiting bool, err error) {
	if run.State != store.StateRunning || run.SummaryDone+run.ReviewDone > 0 {
		return p, false, nil
	}
	ids, err := q.cfg.Store.TaskIDs(ctx, run.PR, run.Head)
	if err != nil || len(ids) == 0 {
		return p, false, err
	}
	found := 0
	for _, model := range q.cfg.Positions.Models() {
		mp, err := q.cfg.Positions.Position(ctx, model, ids)
		if err != nil {
			return p, false, err
		}
		if mp.Found == 0 {
			continue
		}
		found += mp.Found
		// the first file starts on whichever model admits it first
		if p.Found == 0 || sooner(mp, p) {
			p = mp
		}
	}
	return p, found == len(ids), nil
}

// sooner says a is expected before b: by the estimate when both have
// one, else by the jobs ahead.
func sooner(a, b admission.Position) bool {
	if a.Rate > 0 && b.Rate > 0 {
		return a.ETA() < b.ETA()
	}
	return a.Ahead < b.Ahead
}

// Report makes one pass over the runs in progress and shows each
// waiting head's position; it returns how many it looked at.
func (q *QueueReporter) Report(ctx context.Context) (int, error) {
	cfg := &q.cfg
	now, seen := cfg.NowFunc(), 0
	const page = 500
	for start := int64(0); seen < cfg.MaxHeads; start += page {
		runs, err := cfg.Store.ActiveRunsFrom(ctx, start, page)
		if err != nil {
			return seen, err
		}
		for _, run := range runs {
			if seen >= cfg.MaxHeads {
				break
			}
			if run.WaitingUntil.After(now) {
				continue // its check run says it waits for the quota
			}
			p, waiting, err := q.Where(ctx, run)
			if err != nil {
				return seen, err
			}
			if !waiting {
				continue
			}
			seen++
			if cfg.Checks != nil {
				cfg.Checks.Queue(ctx, run.PR, run.Head, p, cfg.Every)
			}
		}
		if len(runs) < page {
			break
		}
	}
	return seen, nil
}

// Run reports every Every until ctx is done; a failed pass is logged.
func (q *QueueReporter) Run(ctx context.Context) {
	t := time.NewTicker(q.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := q.Report(ctx); err != nil && ctx.Err() == nil {
			q.cfg.Log.WarnContext(ctx, "could not report the waiting pull requests' positions", "err", err)
		}
	}
}

// QueueText says where a waiting head stands: a title ("Waiting: 37
// jobs ahead in paid; about 4 min") and a sentence for the summary.
func QueueText(p admission.Position) (title, summary string) {
	where := "in " + p.Class
	if p.Class == admission.ClassChat {
		where = "among chat replies"
	}
	switch {
	case p.Ahead == 0:
		title = "Waiting: next in line " + where
		summary = "This pull request's first file is next in admission's order; it waits for room at the model's rate limit."
	case p.Rate <= 0:
		title = fmt.Sprintf("Waiting: %d %s ahead %s", p.Ahead, plural(p.Ahead, "job"), where)
		summary = fmt.Sprintf("About %d %s wait ahead of this pull request's first file in admission's order. "+
			"No estimate yet: the admission rate is being measured.", p.Ahead, plural(p.Ahead, "job"))
	default:
		eta := about(p.ETA())
		title = fmt.Sprintf("Waiting: %d %s ahead %s; %s", p.Ahead, plural(p.Ahead, "job"), where, eta)
		summary = fmt.Sprintf("About %d %s wait ahead of this pull request's first file in admission's order. "+
			"At the measured rate of %.1f admissions a second it starts in %s.", p.Ahead, plural(p.Ahead, "job"), p.Rate, eta)
	}
	return title, summary
}

func plural(n int64, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// about rounds an estimate for people: seconds, minutes, hours.
func about(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("about %d s", max(int(d.Round(5*time.Second)/time.Second), 5))
	case d < time.Hour:
		return fmt.Sprintf("about %d min", int(d.Round(time.Minute)/time.Minute))
	case d < 48*time.Hour:
		h := d.Round(10 * time.Minute)
		if m := int(h/time.Minute) % 60; m != 0 {
			return fmt.Sprintf("about %d h %d min", int(h/time.Hour), m)
		}
		return fmt.Sprintf("about %d h", int(h/time.Hour))
	}
	return fmt.Sprintf("about %d days", int(d.Round(24*time.Hour)/(24*time.Hour)))
}

// Queue shows where a waiting head stands (see QueueReporter), at most
// once per every across processes, and only when it changed. Failures
// are counted and logged; nothing waits for it.
func (c *Checks) Queue(ctx context.Context, pr jobs.PR, head string, p admission.Position, every time.Duration) {
	title, summary := QueueText(p)
	h := fnv.New64a()
	_, _ = h.Write([]byte(title))
	mark := int64(h.Sum64() >> 1) // waiting writes an unchanged title once
	if ok, err := c.cfg.Store.Throttle(ctx, pr, c.key(head)+":queue", every); err != nil || !ok {
		c.dropped(ctx, pr, DecorationCheckWaiting, err)
		return
	}
	c.waiting(ctx, pr, head, "queue", mark, title, func(store.Run) string { return summary })
}
