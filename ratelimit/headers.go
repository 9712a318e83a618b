package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ProviderState is what a provider's response headers say about its
// limits. Unknown values are -1 (missing or malformed headers).
type ProviderState struct {
	LimitRequests, LimitTokens         int64
	RemainingRequests, RemainingTokens int64
	ResetRequests, ResetTokens         time.Duration
	// Input and output token limits, where the provider limits them apart
	// (Anthropic's anthropic-ratelimit-{input,output}-tokens-*).
	LimitInputTokens, LimitOutputTokens         int64
	RemainingInputTokens, RemainingOutputTokens int64
	ResetInputTokens, ResetOutputTokens         time.Duration
	// TokensMostRestrictive: the tokens values are not a total-token
	// limit but whichever of the input and output limits is most
	// restrictive (Anthropic's tokens-*).
	TokensMostRestrictive bool
	RetryAfter            time.Duration // 0 when absent
}

// ParseHeaders reads the rate-limit headers of OpenAI and Azure OpenAI
// (x-ratelimit-*, retry-after-ms, retry-after) or Anthropic
// (anthropic-ratelimit-*, retry-after). It never fails: a missing or
// malformed value is reported as unknown.
func ParseHeaders(h http.Header) ProviderState { return ParseHeadersAt(h, time.Now()) }

// ParseHeadersAt is ParseHeaders with Anthropic's reset times (RFC 3339)
// read as durations from now. Anthropic's tokens-* headers report the
// most restrictive of its input and output token limits; without them
// the dimension with the least remaining share of its limit stands for
// tokens. Either way the total-token bucket is only ever lowered by them.
func ParseHeadersAt(h http.Header, now time.Time) ProviderState {
	if h.Get("x-ratelimit-remaining-requests") == "" && h.Get("x-ratelimit-remaining-tokens") == "" &&
		(h.Get("anthropic-ratelimit-requests-remaining") != "" || h.Get("anthropic-ratelimit-tokens-remaining") != "" ||
			h.Get("anthropic-ratelimit-input-tokens-remaining") != "") {
		return parseAnthropic(h, now)
	}
	s := ProviderState{
		LimitRequests:     headerInt(h, "x-ratelimit-limit-requests"),
		LimitTokens:       headerInt(h, "x-ratelimit-limit-tokens"),
		RemainingRequests: headerInt(h, "x-ratelimit-remaining-requests"),
		RemainingTokens:   headerInt(h, "x-ratelimit-remaining-tokens"),
		ResetRequests:     headerDuration(h, "x-ratelimit-reset-requests"),
		ResetTokens:       headerDuration(h, "x-ratelimit-reset-tokens"),
		LimitInputTokens:  -1, LimitOutputTokens: -1, RemainingInputTokens: -1, RemainingOutputTokens: -1,
		ResetInputTokens: -1, ResetOutputTokens: -1,
	}
	if ms := headerInt(h, "retry-after-ms"); ms >= 0 {
		s.RetryAfter = time.Duration(ms) * time.Millisecond
	} else if sec := strings.TrimSpace(h.Get("retry-after")); sec != "" {
		if f, err := strconv.ParseFloat(sec, 64); err == nil && f >= 0 && f < 86400 {
			s.RetryAfter = time.Duration(f * float64(time.Second))
		}
	}
	return s
}

func parseAnthropic(h http.Header, now time.Time) ProviderState {
	const p = "anthropic-ratelimit-"
	reset := func(name string) time.Duration {
		v := strings.TrimSpace(h.Get(name))
		if v == "" {
			return -1
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return -1
		}
		return max(t.Sub(now), 0)
	}
	s := ProviderState{
		LimitRequests: headerInt(h, p+"requests-limit"), RemainingRequests: headerInt(h, p+"requests-remaining"),
		ResetRequests: reset(p + "requests-reset"),
		LimitTokens:   headerInt(h, p+"tokens-limit"), RemainingTokens: headerInt(h, p+"tokens-remaining"),
		ResetTokens:      reset(p + "tokens-reset"),
		LimitInputTokens: headerInt(h, p+"input-tokens-limit"), RemainingInputTokens: headerInt(h, p+"input-tokens-remaining"),
		ResetInputTokens:  reset(p + "input-tokens-reset"),
		LimitOutputTokens: headerInt(h, p+"output-tokens-limit"), RemainingOutputTokens: headerInt(h, p+"output-tokens-remaining"),
		ResetOutputTokens:     reset(p + "output-tokens-reset"),
		TokensMostRestrictive: true,
	}
	if s.RemainingTokens < 0 {
		share := 2.0
		for _, dim := range []string{"input-tokens", "output-tokens"} {
			limit, rem := headerInt(h, p+dim+"-limit"), headerInt(h, p+dim+"-remaining")
			if limit <= 0 || rem < 0 {
				continue
			}
			if f := float64(rem) / float64(limit); f < share {
				share = f
				s.LimitTokens, s.RemainingTokens, s.ResetTokens = limit, rem, reset(p+dim+"-reset")
			}
		}
	}
	if sec := strings.TrimSpace(h.Get("retry-after")); sec != "" {
		if f, err := strconv.ParseFloat(sec, 64); err == nil && f >= 0 && f < 86400 {
			s.RetryAfter = time.Duration(f * float64(time.Second))
		}
	}
	return s
}

func headerInt(h http.Header, name string) int64 {
	v := strings.TrimSpace(h.Get(name))
	if v == "" {
		return -1
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

func headerDuration(h http.Header, name string) time.Duration {
	v := strings.TrimSpace(h.Get(name))
	if v == "" {
		return -1
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return -1
	}
	return d
}

// WindowLike reports whether s contradicts a token bucket of period per
// in a way only a window explains. A bucket that has remaining of limit
// is full again after (limit−remaining)/limit of a period, whoever used
// it, so its reset can never be longer; a window's reset is when its
// newest admission leaves the window, a whole window after any call.
func (s ProviderState) WindowLike(per time.Duration) bool {
	slack := max(per/10, 100*time.Millisecond) // rounding, clocks
	like := func(limit, remaining int64, reset time.Duration) bool {
		if limit <= 0 || remaining < 0 || reset < 0 || remaining > limit {
			return false
		}
		refill := time.Duration(float64(limit-remaining) / float64(limit) * float64(per))
		return reset > refill+slack
	}
	return like(s.LimitRequests, s.RemainingRequests, s.ResetRequests) || like(s.LimitTokens, s.RemainingTokens, s.ResetTokens)
}

// windowEvidence is how many window-like reports make a suspicion: one
// could be a provider's hiccup, a bucket never shows three.
const windowEvidence = 3

// The count of window-like reports is shared by every process of the
// bucket (workers see the headers, the dashboard shows the suspicion).
var (
	windowLikeIncr = redis.NewScript(`local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return n`)
	windowLikeGet = redis.NewScript(`return tonumber(redis.call('GET', KEYS[1]) or '0')`)
)

func (b *Bucket) windowLikeKey() string { return b.tag + ":windowlike" }

// WindowLikeReports counts the provider reports that only a window
// explains (see ProviderState.WindowLike), over every process, in the
// last day.
func (b *Bucket) WindowLikeReports(ctx context.Context) (int64, error) {
	n, err := windowLikeGet.Run(ctx, b.rdb, []string{b.windowLikeKey()}).Int64()
	if err != nil {
		return 0, fmt.Errorf("ratelimit: window-like reports: %w", err)
	}
	return n, nil
}

// WindowSuspected reports whether the provider's headers have shown at
// least three times what only a window limiter explains while this
// bucket is configured as a token bucket: set the limiter to window.
func (b *Bucket) WindowSuspected(ctx context.Context) (bool, error) {
	if b.limits.Limiter != LimiterBucket {
		return false, nil // a window, or auto: it switches by itself
	}
	n, err := b.WindowLikeReports(ctx)
	return n >= windowEvidence, err
}

// observe counts a window-like report; the process whose report makes
// the suspicion logs it, so it is logged once. Limiter auto switches
// every key of the model to its window then, and again every 50th report
// (a switch lost with a state that expired while the evidence did not).
func (b *Bucket) observe(ctx context.Context, s ProviderState) error {
	if !s.WindowLike(b.limits.Period) {
		return nil
	}
	n, err := windowLikeIncr.Run(ctx, b.rdb, []string{b.windowLikeKey()}, (24 * time.Hour).Milliseconds()).Int64()
	if err != nil {
		return fmt.Errorf("ratelimit: count window-like report: %w", err)
	}
	attrs := []slog.Attr{slog.String("model", b.model), slog.Int64("remaining_tokens", s.RemainingTokens),
		slog.Int64("limit_tokens", s.LimitTokens), slog.Duration("reset_tokens", s.ResetTokens)}
	switch {
	case (n == windowEvidence || n%50 == 0) && b.limits.Limiter == LimiterAuto:
		switched := false
		for k := range b.Keys() {
			res, err := b.ForKey(k).run(ctx, "window", "", Values{})
			if err != nil {
				return err
			}
			switched = switched || res[0] == 1
		}
		if switched && b.Log != nil {
			b.Log.LogAttrs(ctx, slog.LevelWarn, "provider looks window-limited; limiter auto now counts in a window", attrs...)
		}
	case n == windowEvidence && b.limits.Limiter == LimiterBucket && b.Log != nil:
		b.Log.LogAttrs(ctx, slog.LevelWarn, "provider looks window-limited; set limiter: window", attrs...)
	}
	return nil
}

// Counting says how the bucket counts now: its limiter, and for auto
// LimiterBucket until the provider showed a window, then LimiterWindow.
func (b *Bucket) Counting(ctx context.Context) (Limiter, error) {
	if b.limits.Limiter != LimiterAuto {
		return b.limits.Limiter, nil
	}
	v, err := autoGet.Run(ctx, b.rdb, []string{b.StateKey()}).Text()
	if err != nil {
		return "", fmt.Errorf("ratelimit: how %s counts: %w", b.model, err)
	}
	if v == "w" {
		return LimiterWindow, nil
	}
	return LimiterBucket, nil
}

var autoGet = redis.NewScript(`return redis.call('HGET', KEYS[1], 'auto') or ''`)

// Sync lowers the bucket to what the provider reports remaining (another
// client may share the key); it never raises it. age is how long ago the
// provider counted (the call's duration: it reports remaining as of its
// admission). After a 429 it empties the bucket until the provider's
// retry time so every worker stops at once. It reports whether the
// bucket changed.
func (b *Bucket) Sync(ctx context.Context, status int, h http.Header, age time.Duration) (bool, error) {
	return b.SyncBetween(ctx, status, h, age, age)
}

// SyncBetween is Sync for a report as of some moment between age and
// upto ago (upto at most age): a call's reply reports the provider's
// count at the call's arrival, after its write (age ago) and no later
// than its reply's bound on the arrival (upto ago). A window compares
// its own count to upto ago, so a call of ours written after this one
// and counted before it arrived is not booked twice.
func (b *Bucket) SyncBetween(ctx context.Context, status int, h http.Header, age, upto time.Duration) (bool, error) {
	now := time.Now()
	r, penalized, err := b.Report(ctx, status, h, now.Add(-age), now.Add(-upto))
	if penalized || r == nil {
		return penalized, err
	}
	lowered, lerr := b.lower(ctx, r.Remaining, age, upto)
	return lowered, errors.Join(lerr, err)
}

// Report is what a reply's rate-limit headers say the provider had
// remaining, for a script that lowers the bucket of key Key to it with
// other work (admission's settle: ReportArgs), as SyncBetween does.
type Report struct {
	Key       int    // the bucket's key (Bucket.ForKey)
	Remaining Values // negative: unknown
	// Written and Latest: the provider counted after the call's write
	// and no later than Latest (the reply's bound on its arrival, or the
	// reply): the ages SyncBetween takes, measured when the script runs.
	Written, Latest time.Time
}

// Report does what SyncBetween does of a reply but its lowering: it
// counts a window-like report and, after a 429, empties the bucket
// (penalized true, no Report). It returns the Report to lower the bucket
// with, nil when the headers report nothing remaining.
func (b *Bucket) Report(ctx context.Context, status int, h http.Header, written, latest time.Time) (r *Report, penalized bool, err error) {
	s := ParseHeaders(h)
	oerr := b.observe(ctx, s)
	if status == http.StatusTooManyRequests {
		wait := s.RetryAfter
		if wait <= 0 {
			wait = max(s.ResetRequests, s.ResetTokens, s.ResetInputTokens, s.ResetOutputTokens, time.Second)
		}
		return nil, true, errors.Join(b.Penalize(ctx, wait), oerr)
	}
	if s.RemainingRequests < 0 && s.RemainingTokens < 0 && s.RemainingInputTokens < 0 && s.RemainingOutputTokens < 0 {
		return nil, false, oerr
	}
	remaining := Values{Requests: s.RemainingRequests, Tokens: s.RemainingTokens, Input: s.RemainingInputTokens, Output: s.RemainingOutputTokens}
	if s.TokensMostRestrictive && (b.limits.InputTokensPerPeriod > 0 || b.limits.OutputTokensPerPeriod > 0) {
		// the input and output limits are synced each by itself; the
		// most restrictive of them says nothing of a total
		remaining.Tokens = -1
	}
	return &Report{Key: b.key, Remaining: remaining, Written: written, Latest: latest}, false, oerr
}

// ReportArgs are the arguments of a script that lowers the bucket as
// the sync op does (bucket.lua; admission's settle.lua): age µs, upto µs
// (ages as of now), then the remaining count per dimension, in the
// order of ScriptArgs (a daily dimension's -1: per-minute headers say
// nothing of it).
func (b *Bucket) ReportArgs(r Report, now time.Time) []any {
	age := max(now.Sub(r.Written), 0)
	upto := min(max(now.Sub(r.Latest), 0), age)
	args := []any{age.Microseconds(), upto.Microseconds()}
	for _, d := range b.dims {
		v := d.value(r.Remaining)
		if !d.period {
			v = -1
		}
		args = append(args, v)
	}
	return args
}
