package ratelimit

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/quota.lua
var quotaSource string

var quotaScript = redis.NewScript(quotaSource)

// Period is a quota's calendar window, in UTC.
type Period string

// Quota periods.
const (
	Hour  Period = "hour"
	Day   Period = "day"
	Week  Period = "week" // Monday to Monday, UTC
	Month Period = "month"
)

// ParsePeriod returns the period named s.
func ParsePeriod(s string) (Period, error) {
	switch p := Period(s); p {
	case Hour, Day, Week, Month:
		return p, nil
	}
	return "", fmt.Errorf("unknown quota period %q (want hour, day, week or month)", s)
}

// Window returns the calendar window of the period holding t.
func (p Period) Window(t time.Time) (start, end time.Time) {
	t = t.UTC()
	switch p {
	case Hour:
		start = t.Truncate(time.Hour)
		return start, start.Add(time.Hour)
	case Month:
		start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 1, 0)
	case Week:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		start = time.Date(t.Year(), t.Month(), t.Day()-back, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 7)
	default:
		start = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 1)
	}
}

// QuotaConfig configures tenant quotas.
type QuotaConfig struct {
	// Period is the calendar window. Defaults to Day.
	Period Period
	// MinOutput is the least output worth a call: a call is refused when
	// remaining < input + min(MinOutput, its requested max). Defaults to 16.
	MinOutput int64
	// ReservationTTL bounds how long a crashed worker's reservation holds
	// its tokens (they stay spent, which never overshoots). Defaults to 30m.
	ReservationTTL time.Duration
	// NowFunc replaces the clock used to pick the window (tests). Redis
	// TIME still decides; a disagreement is retried with Redis's time.
	NowFunc func() time.Time
	// Clock, when set, replaces Redis's TIME as well: the stepped clock
	// of a test that crosses a window's end. Production leaves it nil.
	Clock func() time.Time
}

// Quota enforces tenant token quotas without overshoot.
type Quota struct {
	rdb Scripter
	cfg QuotaConfig
}

// NewQuota returns a quota enforcer.
func NewQuota(rdb Scripter, cfg QuotaConfig) (*Quota, error) {
	if cfg.Period == "" {
		cfg.Period = Day
	}
	if _, err := ParsePeriod(string(cfg.Period)); err != nil {
		return nil, fmt.Errorf("ratelimit: quota: %w", err)
	}
	if cfg.MinOutput == 0 {
		cfg.MinOutput = 16
	}
	if cfg.MinOutput < 0 {
		return nil, fmt.Errorf("ratelimit: quota: min output must not be negative")
	}
	if cfg.ReservationTTL == 0 {
		cfg.ReservationTTL = 30 * time.Minute
	}
	if cfg.Clock != nil {
		cfg.NowFunc = cfg.Clock
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	return &Quota{rdb: rdb, cfg: cfg}, nil
}

// Grant is an admitted call's reservation. The caller sets the request's
// max output tokens to Cap (MaxCompletionTokens for reasoning models).
type Grant struct {
	Tenant, Agent, JobID string
	Input                int64
	Cap                  int64
	Remaining            int64 // what is left for others after this reservation
	// Reserved is what the reservation holds in the quota's unit (tokens:
	// Input + Cap; a quota in dollars: their price in nano-dollars).
	Reserved  int64
	Window    time.Time
	Reset     time.Time
	Duplicate bool
}

// QuotaError reports a refused call: nothing was sent, nothing spent.
type QuotaError struct {
	Tenant, Agent string
	// Remaining, Needed and Limit are in the quota's unit (tokens, or
	// nano-dollars for a quota in dollars): what is left, what the call
	// needs at least, and the whole quota of a period.
	Remaining int64
	Needed    int64
	Limit     int64
	Reset     time.Time
}

func (e *QuotaError) Error() string {
	unit := "tokens"
	if strings.HasPrefix(e.Agent, "$") {
		unit = "nano-dollars"
	}
	return fmt.Sprintf("ratelimit: quota of %s/%s reached: %d %s left, %d needed; resets at %s",
		e.Tenant, e.Agent, e.Remaining, unit, e.Needed, e.Reset.UTC().Format(time.RFC3339))
}

// Never says the call needs more than the whole quota of a period: no
// reset will let it through.
func (e *QuotaError) Never() bool { return e.Needed > e.Limit }

// ErrQuotaExceeded matches every *QuotaError with errors.Is.
var ErrQuotaExceeded = errors.New("ratelimit: quota exceeded")

// Is makes errors.Is(err, ErrQuotaExceeded) true.
func (e *QuotaError) Is(target error) bool { return target == ErrQuotaExceeded }

func quotaTag(tenant string) string { return "{prq:quota:" + sanitize(tenant) + "}" }

func (q *Quota) usedKey(tenant, agent string, window time.Time) string {
	return quotaTag(tenant) + ":used:" + sanitize(agent) + ":" + strconv.FormatInt(window.Unix(), 10)
}

func resKey(tenant, jobID string) string { return quotaTag(tenant) + ":res:" + jobID }

// Reserve reserves input tokens plus an output cap for one call of tenant's
// agent (job kind, or "" for one quota across kinds) against limit tokens
// per period. The cap is min(requestedMax, remaining-input). When
// remaining < input + min(MinOutput, requestedMax) it returns a
// *QuotaError and reserves nothing: a call that asks for no output
// (embeddings) needs only its input. The same jobID reserves once: a retry gets the same grant.
func (q *Quota) Reserve(ctx context.Context, tenant, agent, jobID string, limit, input, requestedMax int64) (Grant, error) {
	return q.reserve(ctx, tenant, agent, jobID, limit, input, requestedMax, 1, 1)
}

// NanoDollars are a quota's unit in dollars: 1e-9 US dollars.
const NanoDollars = 1e9

// Nano is a quota of dollars in nano-dollars, to the nearest.
func Nano(dollars float64) int64 { return int64(math.Round(dollars * NanoDollars)) }

// NanoCost is a call's cost in nano-dollars, rounded up past the
// floating point's noise: a settle never counts less than the cost.
func NanoCost(dollars float64) int64 { return int64(math.Ceil(dollars*NanoDollars - 1e-6)) }

// NanoPerToken is a price in dollars per million tokens as nano-dollars
// per token, rounded up: a reservation never holds too little.
func NanoPerToken(perMillion float64) int64 {
	return int64(math.Ceil(perMillion * NanoDollars / 1e6))
}

// ReserveDollars is Reserve for a quota of limit nano-dollars per
// period: the call's input at inputPrice and its output cap at
// outputPrice (nano-dollars per token; round them up) are reserved, the
// cap the most output what is left pays for. Its counter and
// reservation are apart from the tenant's token quota (the grant's
// Agent and JobID name them: Settle takes the actual cost in
// nano-dollars). The input is reserved at the full input price: a part
// the provider serves from its cache costs less, and Settle refunds it.
// A call that asks for no output (embeddings) may have no output price.
func (q *Quota) ReserveDollars(ctx context.Context, tenant, agent, jobID string, limit, input, requestedMax, inputPrice, outputPrice int64) (Grant, error) {
	if inputPrice < 0 || outputPrice < 0 || outputPrice == 0 && requestedMax > 0 {
		return Grant{}, fmt.Errorf("ratelimit: quota: prices must not be negative, nor the output's zero for a call with output (input %d, output %d nano-dollars a token)", inputPrice, outputPrice)
	}
	return q.reserve(ctx, tenant, dollarAgent(agent), jobID+":$", limit, input, requestedMax, inputPrice, outputPrice)
}

// dollarAgent names an agent's quota in dollars.
func dollarAgent(agent string) string { return "$" + agent }

func (q *Quota) reserve(ctx context.Context, tenant, agent, jobID string, limit, input, requestedMax, inPrice, outPrice int64) (Grant, error) {
	switch {
	case tenant == "" || jobID == "":
		return Grant{}, errors.New("ratelimit: quota: tenant and job id are required")
	case input < 0 || requestedMax < 0 || limit < 0:
		return Grant{}, fmt.Errorf("ratelimit: quota: negative amount (limit %d, input %d, max %d)", limit, input, requestedMax)
	}
	minOut := min(q.cfg.MinOutput, requestedMax)
	t := q.cfg.NowFunc()
	for attempt := 0; attempt < 3; attempt++ {
		ws, we := q.cfg.Period.Window(t)
		res, err := quotaScript.Run(ctx, q.rdb, []string{q.usedKey(tenant, agent, ws), resKey(tenant, jobID)},
			"reserve", q.scriptNow(), ws.UnixMicro(), we.UnixMicro(), limit, input, requestedMax, minOut,
			q.cfg.ReservationTTL.Milliseconds(), inPrice, outPrice).Int64Slice()
		if err != nil {
			return Grant{}, fmt.Errorf("ratelimit: quota reserve: %w", err)
		}
		switch res[0] {
		case -3: // our clock and Redis's disagree on the window: use Redis's
			t = time.UnixMicro(res[3])
			continue
		case 0:
			return Grant{}, &QuotaError{Tenant: tenant, Agent: agent, Remaining: res[1], Needed: input*inPrice + minOut*outPrice, Limit: limit, Reset: we}
		}
		w := time.UnixMicro(res[4]).UTC()
		_, end := q.cfg.Period.Window(w)
		return Grant{Tenant: tenant, Agent: agent, JobID: jobID, Input: input, Cap: res[1], Remaining: res[2], Reserved: input*inPrice + res[1]*outPrice,
			Window: w, Reset: end, Duplicate: res[0] == 2}, nil
	}
	return Grant{}, errors.New("ratelimit: quota reserve: clock keeps disagreeing with Redis")
}

// scriptNow is the script's clock: "" for Redis's TIME, else Clock's µs.
func (q *Quota) scriptNow() string {
	if q.cfg.Clock == nil {
		return ""
	}
	return strconv.FormatInt(q.cfg.Clock().UnixMicro(), 10)
}

// Settle records a granted call's actual usage (input + output tokens)
// in place of its reservation, once. It returns ErrNotReserved when the
// grant was settled already or has expired.
func (q *Quota) Settle(ctx context.Context, g Grant, actual int64) error {
	res, err := quotaScript.Run(ctx, q.rdb, []string{q.usedKey(g.Tenant, g.Agent, g.Window), resKey(g.Tenant, g.JobID)},
		"settle", "", actual).Int64Slice()
	if err != nil {
		return fmt.Errorf("ratelimit: quota settle: %w", err)
	}
	if res[0] == 0 {
		return ErrNotReserved
	}
	return nil
}

// Usage is a tenant's quota use in the current window, for display.
type Usage struct {
	Used, Limit int64
	Reset       time.Time
}

// Used returns how much of tenant's agent quota the current window used.
func (q *Quota) Used(ctx context.Context, tenant, agent string, limit int64) (Usage, error) {
	ws, we := q.cfg.Period.Window(q.cfg.NowFunc())
	res, err := quotaScript.Run(ctx, q.rdb, []string{q.usedKey(tenant, agent, ws)}, "peek", "").Int64Slice()
	if err != nil {
		return Usage{}, fmt.Errorf("ratelimit: quota peek: %w", err)
	}
	return Usage{Used: res[0], Limit: limit, Reset: we}, nil
}

// UsedDollars is Used for an agent's quota in dollars (nano-dollars).
func (q *Quota) UsedDollars(ctx context.Context, tenant, agent string, limit int64) (Usage, error) {
	return q.Used(ctx, tenant, dollarAgent(agent), limit)
}
