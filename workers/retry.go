package workers

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// RetryBudget bounds every retry of a job: failures (which asynq
// counts), returns to admission after a provider 429 or account problem,
// and GitHub rate-limit waits (which asynq does not count: IsFailure says
// they are no failure). A job whose budget is spent ends with a recorded
// reason instead of retrying.
type RetryBudget struct {
	// MaxAttempts counts the job's runs, the first included.
	MaxAttempts int
	// MaxAge is how long after the job was planned (or first ran) it may
	// still retry.
	MaxAge time.Duration
}

var (
	// DefaultBatchBudget bounds plan, file and finalize jobs.
	DefaultBatchBudget = RetryBudget{MaxAttempts: 20, MaxAge: 24 * time.Hour}
	// DefaultChatBudget bounds chat replies.
	DefaultChatBudget = RetryBudget{MaxAttempts: 8, MaxAge: 30 * time.Minute}
)

// orDefault returns b, or d where b is unset; a negative field is an error.
func (b RetryBudget) orDefault(d RetryBudget, name string) (RetryBudget, error) {
	if b.MaxAttempts < 0 || b.MaxAge < 0 {
		return b, fmt.Errorf("workers: %s: MaxAttempts and MaxAge must not be negative", name)
	}
	if b.MaxAttempts == 0 {
		b.MaxAttempts = d.MaxAttempts
	}
	if b.MaxAge == 0 {
		b.MaxAge = d.MaxAge
	}
	return b, nil
}

// Why a job gave up: the labels of prq_jobs_gave_up_total.
const (
	GaveUpRateLimited = "rate_limited"        // the provider kept answering 429
	GaveUpAccount     = "account"             // the provider kept refusing the account (revoked key, no quota)
	GaveUpTransient   = "transient"           // the provider kept failing
	GaveUpGitHub      = "github_rate_limited" // GitHub kept rate limiting
	GaveUpFailed      = "failed"              // anything else kept failing
)

// Attempts counts a job's runs in Redis, across processes and across
// every kind of retry, and remembers when it first ran. asynq's retry
// count cannot serve: it counts only failures, and a job back in
// admission or waiting for GitHub is no failure.
type Attempts struct {
	rdb redis.UniversalClient
}

// NewAttempts returns an Attempts on rdb.
func NewAttempts(rdb redis.UniversalClient) *Attempts { return &Attempts{rdb: rdb} }

// Attempter is how the handlers count their runs (an *Attempts).
type Attempter interface {
	Add(ctx context.Context, id string, now time.Time, keep time.Duration) (n int, first time.Time, rebased bool, err error)
	Rebase(ctx context.Context, id string, from time.Time, keep time.Duration) error
	Forget(ctx context.Context, id string) error
	// Moved and SetMoved keep where a job waits that moved to a
	// fallback model.
	Moved(ctx context.Context, id string) (Move, error)
	SetMoved(ctx context.Context, id string, m Move, keep time.Duration) error
	// SetStandard keeps that a job is called at the standard tier from
	// now on (flex processing refused it).
	SetStandard(ctx context.Context, id string, keep time.Duration) error
	// ReuseWait counts a wait for a twin answering the job's prompt.
	ReuseWait(ctx context.Context, id string, keep time.Duration) (int, error)
}

var _ Attempter = (*Attempts)(nil)

func attemptsKey(id string) string { return "prq:attempts:" + id }

//go:embed attempts.lua
var attemptsAddLua string

var attemptsAdd = redis.NewScript(attemptsAddLua)

// Add records one more run of job id at now and returns the runs so far
// (this one included) and the time of the first, or of the rebase
// (rebased) when the budget was started again. The record lasts keep
// after the latest run.
func (a *Attempts) Add(ctx context.Context, id string, now time.Time, keep time.Duration) (int, time.Time, bool, error) {
	res, err := attemptsAdd.Run(ctx, a.rdb, []string{attemptsKey(id)}, now.UnixMilli(), keep.Milliseconds()).Slice()
	if err != nil {
		return 0, time.Time{}, false, fmt.Errorf("workers: count attempts of %s: %w", id, err)
	}
	if len(res) != 3 {
		return 0, time.Time{}, false, fmt.Errorf("workers: count attempts of %s: unreadable reply %v", id, res)
	}
	n, _ := res[0].(int64)
	first, _ := res[1].(string)
	rebased, _ := res[2].(int64)
	ms, err := strconv.ParseInt(first, 10, 64)
	if n < 1 || err != nil {
		return 0, time.Time{}, false, fmt.Errorf("workers: count attempts of %s: first run %q: %v", id, first, err)
	}
	return int(n), time.UnixMilli(ms), rebased == 1, nil
}

// Rebase starts job id's budget again from from, with no runs counted:
// a job that waits for its tenant's quota to reset has spent nothing of
// it while it waited. The record lasts keep.
func (a *Attempts) Rebase(ctx context.Context, id string, from time.Time, keep time.Duration) error {
	key := attemptsKey(id)
	_, err := a.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, "n", 0, "first", from.UnixMilli(), "rebased", 1)
		p.PExpire(ctx, key, keep)
		return nil
	})
	if err != nil {
		return fmt.Errorf("workers: rebase attempts of %s: %w", id, err)
	}
	return nil
}

// Moved returns job id's move (zero: it waits under the model its
// payload names).
func (a *Attempts) Moved(ctx context.Context, id string) (Move, error) {
	v, err := a.rdb.HMGet(ctx, attemptsKey(id), "model", "tokens", "output", "stay", "lane").Result()
	if err != nil {
		return Move{}, fmt.Errorf("workers: read the move of %s: %w", id, err)
	}
	model, _ := v[0].(string)
	standard := v[4] == "standard"
	if model == "" {
		return Move{Standard: standard}, nil
	}
	m := Move{Model: model, Standard: standard}
	if s, ok := v[1].(string); ok {
		m.Tokens, _ = strconv.ParseInt(s, 10, 64)
	}
	if s, ok := v[2].(string); ok {
		m.Output, _ = strconv.ParseInt(s, 10, 64)
	}
	m.Stay = v[3] == "1"
	return m, nil
}

// SetMoved records that job id waits under m.Model now; the record lasts
// keep.
func (a *Attempts) SetMoved(ctx context.Context, id string, m Move, keep time.Duration) error {
	if err := a.set(ctx, id, keep, "model", m.Model, "tokens", m.Tokens, "output", m.Output, "stay", b2i(m.Stay)); err != nil {
		return fmt.Errorf("workers: record the move of %s: %w", id, err)
	}
	return nil
}

// set writes fields of job id's record and renews it for keep.
func (a *Attempts) set(ctx context.Context, id string, keep time.Duration, fields ...any) error {
	key := attemptsKey(id)
	_, err := a.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, fields...)
		p.PExpire(ctx, key, keep)
		return nil
	})
	return err
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// SetStandard records that job id is called at the standard tier from
// now on (flex processing refused it); the record lasts keep.
func (a *Attempts) SetStandard(ctx context.Context, id string, keep time.Duration) error {
	if err := a.set(ctx, id, keep, "lane", "standard"); err != nil {
		return fmt.Errorf("workers: record the standard lane of %s: %w", id, err)
	}
	return nil
}

// ReuseWait counts one more wait of job id for a twin answering its
// prompt and returns how many it has waited; the run that waited is
// taken off the job's retry budget (a wait is not an attempt). The
// record lasts keep.
func (a *Attempts) ReuseWait(ctx context.Context, id string, keep time.Duration) (int, error) {
	key := attemptsKey(id)
	var n *redis.IntCmd
	_, err := a.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		n = p.HIncrBy(ctx, key, "reuse_waits", 1)
		p.HIncrBy(ctx, key, "n", -1)
		p.PExpire(ctx, key, keep)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("workers: count the twin waits of %s: %w", id, err)
	}
	return int(n.Val()), nil
}

// Forget drops job id's record once it has ended, so a later job under
// the same id starts afresh.
func (a *Attempts) Forget(ctx context.Context, id string) error {
	if err := a.rdb.Del(ctx, attemptsKey(id)).Err(); err != nil {
		return fmt.Errorf("workers: forget attempts of %s: %w", id, err)
	}
	return nil
}

// attempt is one run of a job as its budget sees it. The zero attempt
// has no budget: it is never spent.
type attempt struct {
	n      int       // runs so far, this one included
	since  time.Time // when the job was planned, or first ran
	now    time.Time
	budget RetryBudget
	// fresh: this run made the job's record, so no earlier run of it
	// left anything (a reply to repair) to read
	fresh bool
}

// budgeted counts a run of job id against budget. created (unix ms),
// when known, is when the job was planned; else its first run counts.
func budgeted(ctx context.Context, a Attempter, id string, created int64, budget RetryBudget, now time.Time) (attempt, error) {
	n, first, rebased, err := a.Add(ctx, id, now, 2*budget.MaxAge+time.Hour)
	if err != nil {
		return attempt{}, err
	}
	since := first
	if created > 0 && !rebased {
		since = time.UnixMilli(created)
	}
	// the record's first run is this one's time only when this run wrote
	// it (Attempts.Add: the common first run)
	fresh := n == 1 && !rebased && first.UnixMilli() == now.UnixMilli()
	return attempt{n: n, since: since, now: now, budget: budget, fresh: fresh}, nil
}

// spent says that the job may not retry again.
func (a attempt) spent() bool {
	switch {
	case a.budget.MaxAttempts > 0 && a.n >= a.budget.MaxAttempts:
		return true
	case a.budget.MaxAge > 0 && a.now.Sub(a.since) >= a.budget.MaxAge:
		return true
	}
	return false
}

// gaveUp is the public sentence of a job that spent its budget.
func (a attempt) gaveUp(why string) string {
	return fmt.Sprintf("gave up after %d attempts over %s: %s", a.n, a.now.Sub(a.since).Round(time.Second), why)
}

// whyPublic is what a pull request may read of why a job gave up.
func whyPublic(reason string) string {
	switch reason {
	case GaveUpRateLimited:
		return "the provider kept refusing (rate limited)"
	case GaveUpAccount:
		return "the provider kept refusing (account problem)"
	case GaveUpTransient:
		return "the provider kept failing"
	case GaveUpGitHub:
		return "GitHub kept rate limiting"
	}
	return "it kept failing"
}

// giveUpIfSpent ends a job that would retry (err) once its budget is
// spent: asynq archives it with the reason (SkipRetry). A success, an
// end already decided, or a retry within the budget passes unchanged.
// It returns the reason label when the job gave up.
func giveUpIfSpent(at attempt, err error) (string, error) {
	if err == nil || errors.Is(err, asynq.SkipRetry) || errors.Is(err, asynq.RevokeTask) || !at.spent() {
		return "", err
	}
	reason := GaveUpFailed
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		reason = GaveUpGitHub
	}
	return reason, fmt.Errorf("%w: %s: %v", asynq.SkipRetry, at.gaveUp(whyPublic(reason)), err)
}

// budgetOf is what a plan or finalize handler needs of its retry budget.
type budgetOf struct {
	attempts Attempter
	budget   RetryBudget
	gaveUp   func(kind, reason string)
	now      func() time.Time
	log      *slog.Logger
}

// run runs one job under its budget: it counts the run, and a retry
// after the budget is spent ends the job (archived with the reason). A
// job that ends forgets its count.
func (b budgetOf) run(ctx context.Context, kind, id string, process func() error) error {
	return b.runAt(ctx, kind, id, func(attempt) error { return process() })
}

// runAt is run for a job that needs to know its attempt (whether it is
// its last).
func (b budgetOf) runAt(ctx context.Context, kind, id string, process func(attempt) error) error {
	at, err := budgeted(ctx, b.attempts, id, 0, b.budget, b.now())
	if err != nil {
		return err
	}
	reason, err := giveUpIfSpent(at, process(at))
	if reason != "" && b.gaveUp != nil {
		b.gaveUp(kind, reason)
	}
	if err == nil || errors.Is(err, asynq.SkipRetry) || errors.Is(err, asynq.RevokeTask) {
		if ferr := b.attempts.Forget(ctx, id); ferr != nil {
			// the record expires on its own; until then the id starts counted
			b.log.WarnContext(ctx, "could not forget a finished job's attempts", "task", id, "err", ferr)
		}
	}
	return err
}
