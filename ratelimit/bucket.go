package ratelimit

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The bucket library, in four parts read in this order (see their headers).
var (
	//go:embed lua/bucket_slots.lua
	bucketSlots string
	//go:embed lua/bucket_load.lua
	bucketLoad string
	//go:embed lua/bucket_wait.lua
	bucketWait string
	//go:embed lua/bucket_change.lua
	bucketChange string
	//go:embed lua/bucket.lua
	bucketOps string
)

// LuaLibrary is the bucket library (a local table B) for scripts that
// must charge a bucket in their own atomic step. Prepend it to the script.
var LuaLibrary = bucketSlots + "\n" + bucketLoad + "\n" + bucketWait + "\n" + bucketChange

var bucketScript = redis.NewScript(LuaLibrary + "\n" + bucketOps)

// Scripter is the part of a go-redis client the limiters use.
type Scripter interface {
	redis.Scripter
}

// Policy says how a settled reservation's actual usage replaces its estimate.
type Policy string

const (
	// PolicyEstimate keeps the estimate charged and nothing else, as
	// OpenAI counts: it charges ceil(chars/4)+max_tokens when it admits a
	// request, gives back no unused output and charges nothing after. The
	// estimate prq charges is the provider's own, so the bucket stays in
	// step with the provider's; a provider that counts more than that
	// shows it in its remaining-tokens headers, which lower the bucket.
	PolicyEstimate Policy = "estimate"
	// PolicyDebt keeps the estimate charged and adds usage beyond it, for
	// providers that charge at admission and true up what was used beyond.
	// Against a provider that counts only the estimate it leaves that
	// usage unused while jobs wait. Refunding early would cause upstream
	// 429s.
	PolicyDebt Policy = "debt"
	// PolicyRefund replaces the estimate with actual usage both ways, for
	// providers that count only what was used.
	PolicyRefund Policy = "refund"
)

// Limiter is how a provider counts its per-period limits.
type Limiter string

const (
	// LimiterBucket is a token bucket that refills continuously up to a
	// full period's limit: what OpenAI documents.
	LimiterBucket Limiter = "bucket"
	// LimiterWindow admits at most the limit in any window (t−Window, t]:
	// what many gateways and some providers enforce. A bucket's refill
	// would overrun such a provider after every burst.
	LimiterWindow Limiter = "window"
	// LimiterAuto is a token bucket until the provider's rate-limit
	// headers show it counts in a window (three replies a day only a
	// window explains, see ProviderState.WindowLike), then a window with
	// the window settings, in every process at once, for a week past the
	// model's last use.
	LimiterAuto Limiter = "auto"
)

// Windowed reports whether the limiter counts, or may come to count, in
// a window (the window settings apply).
func (l Limits) Windowed() bool { return l.Limiter == LimiterWindow || l.Limiter == LimiterAuto }

// windowSlots is how many slots the shortest window is summed in: the
// limiter counts a slot whole as long as any of it is in the window, so
// it may leave up to 1/windowSlots of the limit unused, never overrun.
const windowSlots = 120

// Limits are one model and API key's provider limits.
type Limits struct {
	// RequestsPerPeriod is the request limit (RPM). Required.
	RequestsPerPeriod int64
	// TokensPerPeriod is the token limit (TPM). Required.
	TokensPerPeriod int64
	// Period is the limit's period. Defaults to one minute; tests and the
	// demo compress it.
	Period time.Duration
	// BurstRequests and BurstTokens cap how much may be admitted at once
	// after idleness. Default to a full period's limit, which is the bucket
	// OpenAI describes (continuous refill up to the limit). Lower them when
	// a provider enforces per-minute limits over shorter slices. A window
	// limiter takes SubWindow instead.
	BurstRequests, BurstTokens int64
	// RequestsPerDay and TokensPerDay are optional daily limits (0: none).
	// A window limiter counts them over a sliding 24 hours.
	RequestsPerDay, TokensPerDay int64
	// InputTokensPerPeriod and OutputTokensPerPeriod are optional limits
	// on a call's input tokens and output tokens alone (Anthropic's ITPM
	// and OTPM; 0: none), each its own dimension next to the total-token
	// one: a call is charged its input estimate on the first and its
	// output allowance (max_tokens) on the second.
	InputTokensPerPeriod, OutputTokensPerPeriod int64
	// BurstInputTokens and BurstOutputTokens cap them as BurstTokens
	// caps tokens (default: a full period's limit).
	BurstInputTokens, BurstOutputTokens int64
	// InputTokensPerDay and OutputTokensPerDay are their daily limits
	// (0: none), counted as TokensPerDay is.
	InputTokensPerDay, OutputTokensPerDay int64
	// Policy settles reservations. Defaults to PolicyEstimate.
	Policy Policy
	// Limiter is how the provider counts. Defaults to LimiterBucket.
	Limiter Limiter
	// Window is the window limiter's span: at most the per-period limits
	// in any Window. Defaults to Period.
	Window time.Duration
	// SubWindow, when set, also caps any shorter SubWindow at
	// SubWindowShare of the limits (providers that evaluate per-minute
	// limits over shorter intervals). Window limiter only.
	SubWindow time.Duration
	// SubWindowShare is the share of the limits any SubWindow may hold, in
	// (0, 1]. Defaults to SubWindow/Window.
	SubWindowShare float64
	// WindowMargin is how much later than prq counts a call the provider
	// may count it (admission moves the charge to the request's write:
	// the request's way over the network): the window limiter
	// holds every admission that much longer, or the provider would still
	// count a call when prq lets the next one in. Defaults to Window/60
	// (1s of a minute) until the calls' way is measured, then to twice
	// the longest way measured over the last two windows, at least 5 ms
	// and at most Window/60 (see Bucket.ObserveWay). Set, it stays as set.
	WindowMargin time.Duration

	// marginMeasured: WindowMargin was not set; the measured way gives
	// the margin, WindowMargin bounds it.
	marginMeasured bool
}

func (l *Limits) setDefaults() {
	if l.Period == 0 {
		l.Period = time.Minute
	}
	if l.Limiter == "" {
		l.Limiter = LimiterBucket
	}
	if l.Windowed() {
		if l.Window == 0 {
			l.Window = l.Period
		}
		if l.SubWindow > 0 && l.SubWindowShare == 0 && l.Window > 0 {
			l.SubWindowShare = float64(l.SubWindow) / float64(l.Window)
		}
		if l.WindowMargin == 0 {
			// the most a measured margin may be (see ObserveWay)
			l.WindowMargin = l.Window / 60
			l.marginMeasured = true
		}
	}
	if l.BurstRequests == 0 {
		l.BurstRequests = l.RequestsPerPeriod
	}
	if l.BurstTokens == 0 {
		l.BurstTokens = l.TokensPerPeriod
	}
	if l.BurstInputTokens == 0 {
		l.BurstInputTokens = l.InputTokensPerPeriod
	}
	if l.BurstOutputTokens == 0 {
		l.BurstOutputTokens = l.OutputTokensPerPeriod
	}
	if l.Policy == "" {
		l.Policy = PolicyEstimate
	}
}

// Validate reports the first bad field by name.
func (l Limits) Validate() error {
	switch {
	case l.RequestsPerPeriod <= 0:
		return fmt.Errorf("requests per period must be positive, got %d", l.RequestsPerPeriod)
	case l.TokensPerPeriod <= 0:
		return fmt.Errorf("tokens per period must be positive, got %d", l.TokensPerPeriod)
	case l.Period < time.Millisecond:
		return fmt.Errorf("period must be at least 1ms, got %s", l.Period)
	case l.BurstRequests < 0 || l.BurstTokens < 0:
		return fmt.Errorf("burst must not be negative")
	case l.RequestsPerDay < 0 || l.TokensPerDay < 0:
		return fmt.Errorf("daily limits must not be negative")
	case l.InputTokensPerPeriod < 0 || l.OutputTokensPerPeriod < 0 || l.InputTokensPerDay < 0 || l.OutputTokensPerDay < 0:
		return fmt.Errorf("input and output token limits must not be negative")
	case l.BurstInputTokens < 0 || l.BurstOutputTokens < 0:
		return fmt.Errorf("input and output token bursts must not be negative")
	case (l.BurstInputTokens > 0 && l.InputTokensPerPeriod == 0) || (l.BurstOutputTokens > 0 && l.OutputTokensPerPeriod == 0):
		return fmt.Errorf("an input or output token burst needs its limit")
	case l.Policy != "" && l.Policy != PolicyEstimate && l.Policy != PolicyDebt && l.Policy != PolicyRefund:
		return fmt.Errorf("settle policy must be %q, %q or %q, got %q", PolicyEstimate, PolicyDebt, PolicyRefund, l.Policy)
	}
	if err := l.validateLimiter(); err != nil {
		return err
	}
	// level = burst * period_us is exact below 2^53; past it a double's
	// rounding is far below a millionth of a token, but past 2^62 the
	// numbers no longer fit the int64 replies.
	day := float64((24 * time.Hour).Microseconds())
	if float64(max(l.BurstTokens, l.TokensPerPeriod, l.InputTokensPerPeriod, l.BurstInputTokens, l.OutputTokensPerPeriod, l.BurstOutputTokens))*float64(l.Period.Microseconds()) > 1<<62 ||
		float64(max(l.TokensPerDay, l.InputTokensPerDay, l.OutputTokensPerDay))*day > 1<<62 {
		return fmt.Errorf("token limit too large (limit x period in µs must stay below 2^62)")
	}
	return nil
}

func (l Limits) validateLimiter() error {
	switch l.Limiter {
	case "", LimiterBucket:
		if l.Window != 0 || l.SubWindow != 0 || l.SubWindowShare != 0 || l.WindowMargin != 0 {
			return fmt.Errorf("window, window margin, sub-window and sub-window share apply to limiters %q and %q only (limiter is %q)", LimiterWindow, LimiterAuto, LimiterBucket)
		}
		return nil
	case LimiterWindow, LimiterAuto:
	default:
		return fmt.Errorf("limiter must be %q, %q or %q, got %q", LimiterBucket, LimiterWindow, LimiterAuto, l.Limiter)
	}
	w := l.Window
	if w == 0 {
		w = l.Period
	}
	switch {
	case w < time.Millisecond || w > 24*time.Hour:
		return fmt.Errorf("window must be between 1ms and 24h, got %s", w)
	case (l.BurstRequests != 0 && l.BurstRequests != l.RequestsPerPeriod) || (l.BurstTokens != 0 && l.BurstTokens != l.TokensPerPeriod) ||
		(l.BurstInputTokens != 0 && l.BurstInputTokens != l.InputTokensPerPeriod) || (l.BurstOutputTokens != 0 && l.BurstOutputTokens != l.OutputTokensPerPeriod):
		return fmt.Errorf("burst applies to limiter %q; a window (or auto) limiter caps bursts with a sub-window", LimiterBucket)
	case l.WindowMargin < 0 || l.WindowMargin > w:
		return fmt.Errorf("window margin must be between 0 and the window %s, got %s", w, l.WindowMargin)
	case l.SubWindow < 0:
		return fmt.Errorf("sub-window must not be negative, got %s", l.SubWindow)
	case l.SubWindow == 0 && l.SubWindowShare != 0:
		return fmt.Errorf("sub-window share needs a sub-window")
	case l.SubWindow == 0:
		return nil
	case l.SubWindow >= w:
		return fmt.Errorf("sub-window %s must be shorter than the window %s", l.SubWindow, w)
	case w/l.SubWindow > 60:
		return fmt.Errorf("sub-window %s is too short: at most 60 sub-windows per window %s", l.SubWindow, w)
	case l.SubWindowShare < 0 || l.SubWindowShare > 1:
		return fmt.Errorf("sub-window share must be in (0, 1], got %g", l.SubWindowShare)
	}
	share := l.SubWindowShare
	if share == 0 {
		share = float64(l.SubWindow) / float64(w)
	}
	if int64(share*float64(l.RequestsPerPeriod)) < 1 || int64(share*float64(l.TokensPerPeriod)) < 1 ||
		(l.InputTokensPerPeriod > 0 && int64(share*float64(l.InputTokensPerPeriod)) < 1) || (l.OutputTokensPerPeriod > 0 && int64(share*float64(l.OutputTokensPerPeriod)) < 1) {
		return fmt.Errorf("sub-window share %g of the limits admits nothing (less than one request or token)", share)
	}
	return nil
}

// subLimit is what any sub-window may hold of limit.
func (l Limits) subLimit(limit int64) int64 {
	return int64(l.SubWindowShare * float64(limit))
}

// Cost is what one call takes from a bucket: one request, its tokens
// in all, and of those its input and its output (for a bucket with input
// or output token limits). A cost that leaves Input and Output zero does
// not split its tokens: reserved, it charges all of them to each of those
// dimensions (never under); settled, it leaves their charges as they are.
type Cost struct {
	Requests int64
	Tokens   int64
	Input    int64
	Output   int64
}

// split reports whether c gives its input and output apart.
func (c Cost) split() bool { return c.Input != 0 || c.Output != 0 }

// values spreads c over the kinds of dimension; unsplit is what the input
// and output dimensions get when c does not split its tokens.
func (c Cost) values(unsplit int64) Values {
	v := Values(c)
	if !c.split() {
		v.Input, v.Output = unsplit, unsplit
	}
	return v
}

// Usage is c as a settle reads it: when c does not split its tokens,
// input and output are unknown (-1) and their charges stay.
func (c Cost) Usage() Values { return c.values(-1) }

// Values are one number per kind of dimension (a cost, a usage, a
// remaining count or a wait) that ScriptArgs spreads over a bucket's
// dimensions: Requests to the request limits (per period and per day),
// Tokens to the total-token limits, Input and Output to the input and
// output token limits. Where a script reads a negative value as unknown,
// that dimension is left alone.
type Values struct {
	Requests, Tokens, Input, Output int64
}

// Marks are the values admission's script reads as each dimension's kind
// (0 requests, 1 tokens, 2 input tokens, 3 output tokens): it charges a
// ticket's own estimate for each.
var Marks = Values{Requests: 0, Tokens: 1, Input: 2, Output: 3}

// uniform is v in every dimension.
func uniform(v int64) Values { return Values{v, v, v, v} }

// Decision is the outcome of a reservation.
type Decision struct {
	// Admitted is true when the cost was charged (or had been, for a
	// duplicate reservation of the same job id).
	Admitted bool
	// Duplicate is true when the job id already held a reservation; nothing
	// was charged twice.
	Duplicate bool
	// Wait is how long until the cost would fit, when not admitted.
	Wait time.Duration
	// Now is Redis's clock at the decision.
	Now time.Time
}

// CostError reports a cost that can never be admitted.
type CostError struct {
	Dimension string
	Cost      int64
	Burst     int64
}

func (e *CostError) Error() string {
	if e.Cost < 0 {
		return fmt.Sprintf("ratelimit: negative %s cost %d", e.Dimension, e.Cost)
	}
	return fmt.Sprintf("ratelimit: %s cost %d exceeds the burst %d and can never be admitted", e.Dimension, e.Cost, e.Burst)
}

// Admissible reports whether a call costing v can ever be admitted under
// l: a cost above a dimension's burst (a window's sub-window share, a
// daily limit) never is, and admission drops it. The error is a
// *CostError naming the first such dimension. Callers that shape calls
// (a prompt cut into parts) ask it before they submit one.
func (l Limits) Admissible(v Values) error {
	l.setDefaults()
	for _, d := range dimensionsOf(l) {
		if c, burst := d.value(v), l.largest(d); c > burst {
			return &CostError{Dimension: d.name, Cost: c, Burst: burst}
		}
	}
	return nil
}

// ErrNotReserved is returned by Settle when the job holds no reservation:
// it was settled already, never reserved, or its reservation expired.
var ErrNotReserved = errors.New("ratelimit: no reservation for job")

// Bucket is one model and API key's shared limits.
type Bucket struct {
	rdb    Scripter
	limits Limits
	tag    string
	// NowFunc, when set, replaces Redis TIME (deterministic tests only).
	NowFunc func() time.Time
	// ReservationTTL bounds how long a crashed worker's reservation
	// lingers. Defaults to 10 minutes.
	ReservationTTL time.Duration
	// Log, when set, gets one warning when the provider looks
	// window-limited while the bucket is not (see WindowSuspected).
	Log *slog.Logger

	model string
	// keys are the short hashes (KeyHash) of the API keys that share the
	// model, one bucket state each; key is the one this Bucket is.
	keys []string
	key  int
	// dims are the limits' dimensions, in the script's order (fixed by
	// the limits: built once).
	dims []dimension
	// way measures the calls' way to the provider (ObserveWay): shared
	// by the copies ForKey makes.
	way *wayMeter
}

// KeyHash returns a short, non-reversible label for an API key, the only
// form in which a key may appear in keys, logs and metrics.
func KeyHash(apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return hex.EncodeToString(sum[:6])
}

// NewBucket returns the bucket of a model and API key.
func NewBucket(rdb Scripter, model, apiKey string, limits Limits) (*Bucket, error) {
	return NewKeyedBucket(rdb, model, []string{apiKey}, limits)
}

// NewKeyedBucket returns the bucket of a model served by several API keys
// (of one provider): each key has a bucket state of its own, with the
// model's limits (a provider limits each key, or organisation, by
// itself). The returned Bucket is the first key's; ForKey gives the
// others. Every state shares the first key's hash tag, so one script can
// choose among them atomically. With one key it is NewBucket's bucket,
// under the same Redis keys.
func NewKeyedBucket(rdb Scripter, model string, apiKeys []string, limits Limits) (*Bucket, error) {
	if model == "" {
		return nil, errors.New("ratelimit: model is required")
	}
	if len(apiKeys) == 0 {
		return nil, fmt.Errorf("ratelimit: model %s: at least one API key is required", model)
	}
	limits.setDefaults()
	if err := limits.Validate(); err != nil {
		return nil, fmt.Errorf("ratelimit: model %s: %w", model, err)
	}
	labels := make([]string, len(apiKeys))
	seen := map[string]bool{}
	for i, k := range apiKeys {
		labels[i] = KeyHash(k)
		// unread keys ("": a process that never calls the provider) may
		// repeat; a real key twice would be counted as two
		if k != "" && seen[labels[i]] {
			return nil, fmt.Errorf("ratelimit: model %s: API key %d (%s) is listed twice", model, i, labels[i])
		}
		seen[labels[i]] = true
	}
	return &Bucket{
		rdb:            rdb,
		limits:         limits,
		tag:            BucketTag(model, apiKeys[0]),
		model:          model,
		ReservationTTL: 10 * time.Minute,
		keys:           labels,
		dims:           dimensionsOf(limits),
		way:            &wayMeter{},
	}, nil
}

// Keys returns how many API keys share the model (at least 1).
func (b *Bucket) Keys() int { return max(len(b.keys), 1) }

// Key returns which of the model's keys this bucket is (0-based).
func (b *Bucket) Key() int { return b.key }

// KeyLabel returns key i's short hash (KeyHash), the only way a key is
// named in Redis, logs and metrics.
func (b *Bucket) KeyLabel(i int) string {
	if i < 0 || i >= len(b.keys) {
		return ""
	}
	return b.keys[i]
}

// ForKey returns the bucket of the model's key i (a copy sharing the
// limits and the hash tag, charging key i's state). Out of range, it is
// nil.
func (b *Bucket) ForKey(i int) *Bucket {
	if i < 0 || i >= b.Keys() {
		return nil
	}
	c := *b
	c.key = i
	return &c
}

// BucketTag is the Redis hash tag of a model and API key's bucket: scripts
// that charge it must keep every key they touch under this tag.
func BucketTag(model, apiKey string) string {
	return "{prq:rl:" + sanitize(model) + ":" + KeyHash(apiKey) + "}"
}

// Tag returns the bucket's hash tag.
func (b *Bucket) Tag() string { return b.tag }

// Limits returns the bucket's effective limits.
func (b *Bucket) Limits() Limits { return b.limits }

// StateKey is the key of the bucket's state hash: this key's. The first
// key's is the model's as it always was; another key's is named by its
// short hash, so reordering the keys keeps each key's state.
func (b *Bucket) StateKey() string { return b.KeyStateKey(b.key) }

// KeyStateKey is the state hash of the model's key i.
func (b *Bucket) KeyStateKey(i int) string {
	if i == 0 {
		return b.tag + ":state"
	}
	return b.tag + ":key:" + b.KeyLabel(i) + ":state"
}

func (b *Bucket) reservationKey(jobID string) string { return b.tag + ":res:" + jobID }

// dimension is one limit of the bucket, in the order the script counts
// them: requests and tokens per period, then their daily limits, then the
// input and output token limits per period and per day (added last, so a
// bucket's stored state keeps its fields when they are configured).
type dimension struct {
	// id names the dimension's fields in the bucket's state (w<id>…,
	// l<id>): fixed per kind of limit, so configuring or dropping
	// another limit leaves a dimension's state where it is.
	id           int
	name         string
	limit, burst int64
	span         time.Duration
	period       bool // a per-period limit (a window's margin and sub-window apply)
	value        func(Values) int64
}

func dimensionsOf(l Limits) []dimension {
	span := l.Period
	if l.Limiter == LimiterWindow {
		span = l.Window
	}
	day := 24 * time.Hour
	dims := []dimension{
		{1, "requests", l.RequestsPerPeriod, l.BurstRequests, span, true, func(v Values) int64 { return v.Requests }},
		{2, "tokens", l.TokensPerPeriod, l.BurstTokens, span, true, func(v Values) int64 { return v.Tokens }},
	}
	if l.RequestsPerDay > 0 {
		dims = append(dims, dimension{3, "requests/day", l.RequestsPerDay, l.RequestsPerDay, day, false, func(v Values) int64 { return v.Requests }})
	}
	if l.TokensPerDay > 0 {
		dims = append(dims, dimension{4, "tokens/day", l.TokensPerDay, l.TokensPerDay, day, false, func(v Values) int64 { return v.Tokens }})
	}
	if l.InputTokensPerPeriod > 0 {
		dims = append(dims, dimension{5, "input tokens", l.InputTokensPerPeriod, l.BurstInputTokens, span, true, func(v Values) int64 { return v.Input }})
	}
	if l.OutputTokensPerPeriod > 0 {
		dims = append(dims, dimension{6, "output tokens", l.OutputTokensPerPeriod, l.BurstOutputTokens, span, true, func(v Values) int64 { return v.Output }})
	}
	if l.InputTokensPerDay > 0 {
		dims = append(dims, dimension{7, "input tokens/day", l.InputTokensPerDay, l.InputTokensPerDay, day, false, func(v Values) int64 { return v.Input }})
	}
	if l.OutputTokensPerDay > 0 {
		dims = append(dims, dimension{8, "output tokens/day", l.OutputTokensPerDay, l.OutputTokensPerDay, day, false, func(v Values) int64 { return v.Output }})
	}
	return dims
}

// ScriptArgs returns the dimension arguments B.load reads for values v
// (cost, actual usage, remaining or wait per kind of dimension).
func (b *Bucket) ScriptArgs(v Values) []any { return b.scriptArgs(v, true) }

// scriptArgs is ScriptArgs; without daily, the daily dimensions get -1
// (unknown: a provider's per-minute headers say nothing of them).
func (b *Bucket) scriptArgs(v Values, daily bool) []any {
	l := b.limits
	dims := b.dims
	args := []any{len(dims)}
	for _, d := range dims {
		value := d.value(v)
		if !daily && !d.period {
			value = -1
		}
		if !l.Windowed() {
			args = append(args, "b"+strconv.Itoa(d.id), d.limit, d.span.Microseconds(), d.burst, value)
			continue
		}
		span := d.span // auto: the bucket's period; its window is Window
		if l.Limiter == LimiterAuto && d.period {
			span = l.Window
		}
		var subUS, subLimit int64
		shortest := span
		if d.period && l.SubWindow > 0 {
			subUS, subLimit, shortest = l.SubWindow.Microseconds(), l.subLimit(d.limit), l.SubWindow
		}
		slot := max(shortest.Microseconds()/windowSlots, 1)
		// an admission counts a margin longer than the provider's window;
		// a measured one is named (own), so the script holds the longest
		// any process measured (-1: not measured)
		var margin, own int64 = 0, -1
		if d.period {
			m, measured := b.margin()
			margin = m.Microseconds()
			if measured {
				own = margin
			}
			if subUS > 0 {
				subUS += margin
			}
		}
		if l.Limiter == LimiterAuto {
			args = append(args, "a"+strconv.Itoa(d.id), d.limit, d.span.Microseconds(), d.burst, value, span.Microseconds()+margin, subUS, subLimit, slot, own)
			continue
		}
		args = append(args, "w"+strconv.Itoa(d.id), d.limit, span.Microseconds()+margin, subUS, subLimit, slot, value, own)
	}
	return args
}

// dimName names dimension i (1-based) as the script counts them.
func (b *Bucket) dimName(i int64) string {
	dims := b.dims
	if i >= 1 && int(i) <= len(dims) {
		return dims[i-1].name
	}
	return "dimension " + strconv.FormatInt(i, 10)
}

// burstOf returns dimension i's share of cost c and the most one call
// may ever take of it.
func (b *Bucket) burstOf(i int64, c Cost) (cost, burst int64) {
	dims := b.dims
	if i < 1 || int(i) > len(dims) {
		return 0, 0
	}
	d := dims[i-1]
	return d.value(c.values(c.Tokens)), b.limits.largest(d)
}

// largest is the most one admission may charge dimension d: its burst,
// a window's sub-window share of its limit.
func (l Limits) largest(d dimension) int64 {
	if d.period && l.Windowed() && l.SubWindow > 0 {
		return l.subLimit(d.limit)
	}
	return d.burst
}

func (b *Bucket) now() string {
	if b.NowFunc == nil {
		return ""
	}
	return strconv.FormatInt(b.NowFunc().UnixMicro(), 10)
}

func (b *Bucket) run(ctx context.Context, op, jobID string, v Values, extra ...any) ([]int64, error) {
	return b.runArgs(ctx, op, jobID, b.ScriptArgs(v), extra...)
}

func (b *Bucket) runArgs(ctx context.Context, op, jobID string, dims []any, extra ...any) ([]int64, error) {
	args := append([]any{op, b.now()}, dims...)
	args = append(args, extra...)
	res, err := bucketScript.Run(ctx, b.rdb, []string{b.StateKey(), b.reservationKey(jobID)}, args...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("ratelimit: %s: %w", op, err)
	}
	return res, nil
}

// Reserve charges cost for jobID if it fits in every dimension now.
// A second reservation of the same job id charges nothing and reports
// Duplicate. A cost above the burst, or negative, is a *CostError.
func (b *Bucket) Reserve(ctx context.Context, jobID string, c Cost) (Decision, error) {
	if jobID == "" {
		return Decision{}, errors.New("ratelimit: reserve: job id is required")
	}
	res, err := b.run(ctx, "reserve", jobID, c.values(c.Tokens), b.ReservationTTL.Milliseconds())
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Now: time.UnixMicro(res[2])}
	switch res[0] {
	case 1:
		d.Admitted = true
	case 2:
		d.Admitted, d.Duplicate = true, true
	case 0:
		d.Wait = time.Duration(res[1]) * time.Microsecond
	default:
		cost, burst := b.burstOf(res[1], c)
		return d, &CostError{Dimension: b.dimName(res[1]), Cost: cost, Burst: burst}
	}
	return d, nil
}

// Settle corrects jobID's estimate with its actual usage, once, under the
// bucket's policy; a zero actual (no call was made) gives the whole
// reservation back under any policy. It returns ErrNotReserved when there
// is nothing to settle.
func (b *Bucket) Settle(ctx context.Context, jobID string, actual Cost) error {
	policy := b.limits.Policy
	if actual == (Cost{}) { // no call was made: the provider counted nothing
		policy = PolicyRefund
	}
	res, err := b.run(ctx, "settle", jobID, actual.Usage(), string(policy))
	if err != nil {
		return err
	}
	if res[0] == 0 {
		return ErrNotReserved
	}
	return nil
}

// Lower brings the bucket down to what the provider reports remaining, in
// requests, tokens, input and output tokens (negative: unknown), as of
// age ago: the provider counted at admission, and its bucket has
// refilled since. It never raises the bucket; daily limits are left.
func (b *Bucket) Lower(ctx context.Context, remaining Values, age time.Duration) (bool, error) {
	return b.lower(ctx, remaining, age, age)
}

// lower is Lower for a report as of some moment between age and upto
// ago (upto at most age): a window counts its own to upto ago, so a
// charge of ours the provider may have counted is not booked twice.
func (b *Bucket) lower(ctx context.Context, remaining Values, age, upto time.Duration) (bool, error) {
	res, err := b.runArgs(ctx, "sync", "", b.scriptArgs(remaining, false), max(age, 0).Microseconds(), min(max(upto, 0), max(age, 0)).Microseconds())
	if err != nil {
		return false, err
	}
	return res[0] == 1, nil
}

// Penalize empties the bucket until wait has passed, so every worker that
// shares it stops at once (after a provider 429).
func (b *Bucket) Penalize(ctx context.Context, wait time.Duration) error {
	if wait <= 0 {
		wait = time.Second
	}
	us := wait.Microseconds()
	_, err := b.run(ctx, "penalize", "", uniform(us))
	return err
}

// Available returns what the bucket could admit now: requests, tokens,
// and input and output tokens where it limits them (else 0).
func (b *Bucket) Available(ctx context.Context) (Cost, time.Time, error) {
	res, err := b.run(ctx, "peek", "", Values{})
	if err != nil {
		return Cost{}, time.Time{}, err
	}
	dims := b.dims
	if len(res) < 1+len(dims) {
		return Cost{}, time.Time{}, fmt.Errorf("ratelimit: peek: short reply")
	}
	var c Cost
	for i, d := range dims {
		switch d.name {
		case "requests":
			c.Requests = res[1+i]
		case "tokens":
			c.Tokens = res[1+i]
		case "input tokens":
			c.Input = res[1+i]
		case "output tokens":
			c.Output = res[1+i]
		}
	}
	return c, time.UnixMicro(res[0]), nil
}

// AvailableAll returns what the model's buckets could admit now, summed
// over its API keys (with one key, Available). A single call still
// needs room on one key.
func (b *Bucket) AvailableAll(ctx context.Context) (Cost, error) {
	var sum Cost
	for i := range b.Keys() {
		c, _, err := b.ForKey(i).Available(ctx)
		if err != nil {
			return Cost{}, err
		}
		sum.Requests += c.Requests
		sum.Tokens += c.Tokens
		sum.Input += c.Input
		sum.Output += c.Output
	}
	return sum, nil
}

func sanitize(s string) string {
	out := []byte(s)
	for i, c := range out {
		switch c {
		case '{', '}', ':', ' ':
			out[i] = '_'
		}
	}
	return string(out)
}
