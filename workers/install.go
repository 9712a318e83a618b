package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/store"
)

// InstallState says whether an installation's work may run, and records
// GitHub refusing it a token (a *store.Store).
type InstallState interface {
	Disabled(ctx context.Context, inst int64) (reason string, err error)
	MarkTokenRefused(ctx context.Context, inst int64, why string) error
}

var _ InstallState = (*store.Store)(nil)

// installGate stops the work of an installation that was uninstalled or
// suspended, or that GitHub refuses a token: its jobs vanish (no call, no
// write) with a reason in the log and prq_lifecycle_total{event="job_skipped"}.
// A nil state lets everything run.
type installGate struct {
	state InstallState
	count func(event, reason string)
	log   *slog.Logger
}

// check returns nil when inst's work may run, else the error that makes
// the job vanish.
func (g installGate) check(ctx context.Context, inst int64, kind string) error {
	if g.state == nil {
		return nil
	}
	why, err := g.state.Disabled(ctx, inst)
	return g.judge(ctx, inst, kind, why, err)
}

// question is where a job's gate finds its installation's state: an
// answer it has (why, err), or, with fold, a read of the store's own
// record the job's other reads carry (ReadFileJob), asked at at.
type question struct {
	why  string
	err  error
	fold bool
	at   time.Time
}

// ask answers for inst what the gate can without the job's read: no
// state to ask, a fresh answer its cache keeps, or a state other than
// the store's record (asked apart, as check does); else the job's read
// is to carry the record (fold).
func (g installGate) ask(ctx context.Context, inst int64) question {
	var st InstallState = g.state
	var at time.Time
	if c, cached := st.(*installCache); cached {
		at = c.now()
		if why, ok := c.fresh(inst, at); ok {
			return question{why: why}
		}
		st = c.next
	}
	switch st.(type) {
	case nil:
		return question{}
	case *store.Store:
		return question{fold: true, at: at}
	}
	why, err := g.state.Disabled(ctx, inst)
	return question{why: why, err: err}
}

// learned keeps the record a job's read found for a folded question
// (why, or the error reading it), where the gate caches, as of when it
// was asked.
func (g installGate) learned(inst int64, q question, why string, err error) question {
	if err == nil {
		if c, cached := g.state.(*installCache); cached {
			c.remember(inst, why, q.at)
		}
	}
	return question{why: why, err: err}
}

// judge is the gate's verdict on inst's state (why, or the error reading
// it): nil when its work may run, else the error that makes the job
// vanish, or the read's.
func (g installGate) judge(ctx context.Context, inst int64, kind, why string, err error) error {
	if err != nil || why == "" {
		return err
	}
	if g.count != nil {
		g.count("job_skipped", why)
	}
	g.log.InfoContext(ctx, "job of a disabled installation dropped", "installation", inst, "kind", kind, "reason", why)
	return fmt.Errorf("installation %d is %s: %w", inst, why, asynq.RevokeTask)
}

// refused turns GitHub refusing inst a token into a permanent end: the
// installation is marked (its other jobs stop too) and the job vanishes.
// Any other error passes unchanged.
func (g installGate) refused(ctx context.Context, inst int64, err error) error {
	var re *ghapp.InstallationRefusedError
	if !errors.As(err, &re) {
		return err
	}
	if g.state != nil {
		if merr := g.state.MarkTokenRefused(ctx, inst, re.Reason()); merr != nil {
			g.log.WarnContext(ctx, "could not record that GitHub refuses the installation a token; its next jobs will ask again", "installation", inst, "err", merr)
		}
	}
	if g.count != nil {
		g.count("job_skipped", store.DisabledTokenRefused)
	}
	g.log.WarnContext(ctx, "GitHub refuses the installation a token; its work stops until it is installed or unsuspended again", "installation", inst, "reason", re.Reason())
	return fmt.Errorf("%w: %v", asynq.RevokeTask, err)
}

// installsFor is how long a worker process keeps an installation's state
// for its file jobs (installCache): one of an installation uninstalled or
// suspended meanwhile may still pass the gate within it, and then stops
// at its run's check before any call or write, the webhook having
// cancelled the installation's runs (CancelInstallation); a refused token
// stops it anyway. Plans, chat and finalize read the state afresh.
const installsFor = 2 * time.Second

// installCache is an InstallState that keeps each installation's answer
// for a while: every job asks, and an installation's state changes
// rarely (one GET of the installation record per job before). Marking an
// installation refused forgets its answer.
type installCache struct {
	next InstallState
	ttl  time.Duration
	now  func() time.Time
	mu   sync.Mutex
	m    map[int64]installAnswer
}

type installAnswer struct {
	why string
	at  time.Time
}

// installCacheMax bounds the entries: past it, the expired go.
const installCacheMax = 4096

func newInstallCache(next InstallState, ttl time.Duration, now func() time.Time) *installCache {
	return &installCache{next: next, ttl: ttl, now: now, m: map[int64]installAnswer{}}
}

var _ InstallState = (*installCache)(nil)

// Disabled answers from the cache while the answer is younger than ttl.
func (c *installCache) Disabled(ctx context.Context, inst int64) (string, error) {
	now := c.now()
	if why, ok := c.fresh(inst, now); ok {
		return why, nil
	}
	why, err := c.next.Disabled(ctx, inst)
	if err != nil {
		return "", err
	}
	c.remember(inst, why, now)
	return why, nil
}

// fresh returns inst's answer while it is younger than ttl at now.
func (c *installCache) fresh(inst int64, now time.Time) (string, bool) {
	c.mu.Lock()
	a, ok := c.m[inst]
	c.mu.Unlock()
	if ok && now.Sub(a.at) < c.ttl && !now.Before(a.at) {
		return a.why, true
	}
	return "", false
}

// remember keeps inst's answer, asked at now (its age counts from the
// question, not from the answer's arrival).
func (c *installCache) remember(inst int64, why string, now time.Time) {
	c.mu.Lock()
	if len(c.m) >= installCacheMax {
		for k, v := range c.m {
			if now.Sub(v.at) >= c.ttl {
				delete(c.m, k)
			}
		}
	}
	c.m[inst] = installAnswer{why: why, at: now}
	c.mu.Unlock()
}

// MarkTokenRefused records the refusal and forgets inst's answer.
func (c *installCache) MarkTokenRefused(ctx context.Context, inst int64, why string) error {
	err := c.next.MarkTokenRefused(ctx, inst, why)
	c.mu.Lock()
	delete(c.m, inst)
	c.mu.Unlock()
	return err
}
