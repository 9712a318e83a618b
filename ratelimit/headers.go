package ratelimit

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ProviderState is what a provider's response headers say about its
// limits. Unknown values are -1 (missing or malformed headers).
type ProviderState struct {
	LimitRequests, LimitTokens         int64
	RemainingRequests, RemainingTokens int64
	ResetRequests, ResetTokens         time.Duration
	RetryAfter                         time.Duration // 0 when absent
}

// ParseHeaders reads OpenAI's x-ratelimit-* and retry-after headers. It
// never fails: a missing or malformed value is reported as unknown.
func ParseHeaders(h http.Header) ProviderState {
	s := ProviderState{
		LimitRequests:     headerInt(h, "x-ratelimit-limit-requests"),
		LimitTokens:       headerInt(h, "x-ratelimit-limit-tokens"),
		RemainingRequests: headerInt(h, "x-ratelimit-remaining-requests"),
		RemainingTokens:   headerInt(h, "x-ratelimit-remaining-tokens"),
		ResetRequests:     headerDuration(h, "x-ratelimit-reset-requests"),
		ResetTokens:       headerDuration(h, "x-ratelimit-reset-tokens"),
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

// Sync lowers the bucket to what the provider reports remaining (another
// client may share the key); it never raises it. age is how long ago the
// provider counted (the call's duration: it reports remaining as of its
// admission). After a 429 it empties the bucket until the provider's
// retry time so every worker stops at once. It reports whether the
// bucket changed.
func (b *Bucket) Sync(ctx context.Context, status int, h http.Header, age time.Duration) (bool, error) {
	s := ParseHeaders(h)
	if status == http.StatusTooManyRequests {
		wait := s.RetryAfter
		if wait <= 0 {
			wait = max(s.ResetRequests, s.ResetTokens, time.Second)
		}
		return true, b.Penalize(ctx, wait)
	}
	if s.RemainingRequests < 0 && s.RemainingTokens < 0 {
		return false, nil
	}
	return b.Lower(ctx, Cost{Requests: s.RemainingRequests, Tokens: s.RemainingTokens}, age)
}
