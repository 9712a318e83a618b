package workers

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
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
	Add(ctx context.Context, id string, now time.Time, keep time.Duration) (Count, error)
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

// Count is a job's runs as one run of it counted them.
type Count struct {
	N       int       // runs so far, this one included
	First   time.Time // the first run's time, or the rebase's
	Rebased bool      // the budget was started again at First
	// Fresh: this run wrote the job's count record, so no earlier run
	// of it left anything (a reply to repair) to read
	Fresh bool
}

// attemptsKey is job id's record, a hash: its move and its waits for a
// twin. Its count (countKey) is a string key of the same cluster slot,
// which a first run writes with one SET NX.
func attemptsKey(id string) string { return "prq:attempts:" + id }

// countKey is job id's count record (countRecord: its runs, the first
// run's time, a rebase), in its record's cluster slot: its hash tag is
// the record's name. prq's job ids hold no braces (package jobs escapes
// every byte but letters, digits, '-' and '_' of what it puts in an id,
// and asynq's own ids are UUIDs); an id with a hash tag of its own
// ("{…}") puts the record in that tag's slot, and the count follows it.
// An id with a '}' outside a tag has no key in its record's slot: that
// is an error.
func countKey(id string) (string, error) {
	rec := attemptsKey(id)
	if i := strings.IndexByte(rec, '{'); i >= 0 {
		if j := strings.IndexByte(rec[i+1:], '}'); j > 0 {
			return rec + ":n", nil
		}
	}
	if strings.IndexByte(rec, '}') >= 0 {
		return "", errors.New("a '}' outside a hash tag leaves no key in the record's slot")
	}
	return "{" + rec + "}:n", nil
}

// countRecord is a job's count record as stored: space-separated
// name=value fields, n (runs so far), first (the first run's, or the
// rebase's, unix ms) and rebased (1: the budget was started again at
// first), as "n=1 first=1800000000000 rebased=0". attempts_count.lua is
// Lua's codec of it, testdata/attempts_count.json the golden cases both
// are tested against (TestCountGolden).
type countRecord struct {
	n       int
	first   int64 // unix ms; 0: none yet
	rebased bool
}

func (c countRecord) encode() string {
	s := "n=" + strconv.Itoa(c.n)
	if c.first != 0 {
		s += " first=" + strconv.FormatInt(c.first, 10)
	}
	return s + " rebased=" + strconv.Itoa(b2i(c.rebased))
}

// decodeCount reads a stored count record. A missing field reads as n 0,
// no first, not rebased; a field of another name is skipped; a value
// that is no number is an error.
func decodeCount(s string) (countRecord, error) {
	var c countRecord
	for _, f := range strings.Fields(s) {
		name, v, _ := strings.Cut(f, "=")
		var err error
		switch name {
		case "n":
			c.n, err = strconv.Atoi(v)
		case "first":
			c.first, err = strconv.ParseInt(v, 10, 64)
		case "rebased":
			c.rebased = v == "1"
		}
		if err != nil {
			return countRecord{}, fmt.Errorf("field %s: %w", name, err)
		}
	}
	return c, nil
}

//go:embed attempts_count.lua
var attemptsCountLua string

//go:embed attempts.lua
var attemptsAddLua string

//go:embed attempts_wait.lua
var attemptsWaitLua string

var (
	attemptsAdd  = redis.NewScript(attemptsCountLua + "\n" + attemptsAddLua)
	attemptsWait = redis.NewScript(attemptsCountLua + "\n" + attemptsWaitLua)
)

// Add records one more run of job id at now and returns the runs so far
// (this one included) and the time of the first, or of the rebase
// (Rebased) when the budget was started again. The count lasts keep
// after the latest run. A first run is one SET NX; a later one (the
// record exists) runs attempts.lua, which renews the job's record too.
func (a *Attempts) Add(ctx context.Context, id string, now time.Time, keep time.Duration) (Count, error) {
	key, err := countKey(id)
	var wrote bool
	first := countRecord{n: 1, first: now.UnixMilli()}
	if err == nil {
		wrote, err = a.rdb.SetNX(ctx, key, first.encode(), keep).Result()
	}
	if err != nil {
		return Count{}, fmt.Errorf("workers: count attempts of %s: %w", id, err)
	}
	if wrote {
		return Count{N: 1, First: time.UnixMilli(first.first), Fresh: true}, nil
	}
	res, err := attemptsAdd.Run(ctx, a.rdb, []string{key, attemptsKey(id)}, now.UnixMilli(), keep.Milliseconds()).Slice()
	if err != nil {
		return Count{}, fmt.Errorf("workers: count attempts of %s: %w", id, err)
	}
	if len(res) != 2 {
		return Count{}, fmt.Errorf("workers: count attempts of %s: unreadable reply %v", id, res)
	}
	stored, _ := res[0].(string)
	fresh, _ := res[1].(int64)
	c, err := decodeCount(stored)
	if err == nil && (c.n < 1 || c.first == 0) {
		err = errors.New("no run or no first run")
	}
	if err != nil {
		return Count{}, fmt.Errorf("workers: count attempts of %s: record %q: %w", id, stored, err)
	}
	return Count{N: c.n, First: time.UnixMilli(c.first), Rebased: c.rebased, Fresh: fresh == 1}, nil
}

// Rebase starts job id's budget again from from, with no runs counted:
// a job that waits for its tenant's quota to reset has spent nothing of
// it while it waited. The count and the job's record last keep.
func (a *Attempts) Rebase(ctx context.Context, id string, from time.Time, keep time.Duration) error {
	key, err := countKey(id)
	if err == nil {
		_, err = a.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, key, countRecord{first: from.UnixMilli(), rebased: true}.encode(), keep)
			p.PExpire(ctx, attemptsKey(id), keep)
			return nil
		})
	}
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
// count and the job's record last keep.
func (a *Attempts) ReuseWait(ctx context.Context, id string, keep time.Duration) (int, error) {
	key, err := countKey(id)
	var n int
	if err == nil {
		n, err = attemptsWait.Run(ctx, a.rdb, []string{key, attemptsKey(id)}, keep.Milliseconds()).Int()
	}
	if err != nil {
		return 0, fmt.Errorf("workers: count the twin waits of %s: %w", id, err)
	}
	return n, nil
}

// Forget drops job id's count and record once it has ended, so a later
// job under the same id starts afresh: one DEL of both.
func (a *Attempts) Forget(ctx context.Context, id string) error {
	key, err := countKey(id)
	if err == nil {
		err = a.rdb.Del(ctx, key, attemptsKey(id)).Err()
	}
	if err != nil {
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
	c, err := a.Add(ctx, id, now, 2*budget.MaxAge+time.Hour)
	if err != nil {
		return attempt{}, err
	}
	since := c.First
	if created > 0 && !c.Rebased {
		since = time.UnixMilli(created)
	}
	return attempt{n: c.N, since: since, now: now, budget: budget, fresh: c.Fresh}, nil
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
