package ratelimit_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prq-dev/prq/ratelimit"
)

func TestParseProviderHeaders(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339) }
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	tests := []struct {
		name string
		h    http.Header
		want ratelimit.ProviderState
	}{
		{"anthropic with tokens-*", hdr(
			"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "49", "anthropic-ratelimit-requests-reset", at(2*time.Second),
			"anthropic-ratelimit-tokens-limit", "8000", "anthropic-ratelimit-tokens-remaining", "7000", "anthropic-ratelimit-tokens-reset", at(7*time.Second),
			"anthropic-ratelimit-input-tokens-remaining", "40000", "anthropic-ratelimit-output-tokens-remaining", "7000"),
			ratelimit.ProviderState{LimitRequests: 50, RemainingRequests: 49, ResetRequests: 2 * time.Second,
				LimitTokens: 8000, RemainingTokens: 7000, ResetTokens: 7 * time.Second,
				LimitInputTokens: -1, RemainingInputTokens: 40000, ResetInputTokens: -1, LimitOutputTokens: -1, RemainingOutputTokens: 7000, ResetOutputTokens: -1,
				TokensMostRestrictive: true}},
		{"anthropic input and output only: the scarcer share stands for tokens", hdr(
			"anthropic-ratelimit-requests-remaining", "3",
			"anthropic-ratelimit-input-tokens-limit", "50000", "anthropic-ratelimit-input-tokens-remaining", "10000", "anthropic-ratelimit-input-tokens-reset", at(48*time.Second),
			"anthropic-ratelimit-output-tokens-limit", "10000", "anthropic-ratelimit-output-tokens-remaining", "5000", "anthropic-ratelimit-output-tokens-reset", at(30*time.Second),
			"retry-after", "4"),
			ratelimit.ProviderState{LimitRequests: -1, RemainingRequests: 3, ResetRequests: -1,
				LimitTokens: 50000, RemainingTokens: 10000, ResetTokens: 48 * time.Second, RetryAfter: 4 * time.Second,
				LimitInputTokens: 50000, RemainingInputTokens: 10000, ResetInputTokens: 48 * time.Second,
				LimitOutputTokens: 10000, RemainingOutputTokens: 5000, ResetOutputTokens: 30 * time.Second, TokensMostRestrictive: true}},
		{"azure: remaining only, retry-after-ms", hdr("x-ratelimit-remaining-requests", "7", "x-ratelimit-remaining-tokens", "1200", "retry-after-ms", "1500", "retry-after", "2"),
			ratelimit.ProviderState{LimitRequests: -1, LimitTokens: -1, RemainingRequests: 7, RemainingTokens: 1200, ResetRequests: -1, ResetTokens: -1,
				RetryAfter: 1500 * time.Millisecond, LimitInputTokens: -1, RemainingInputTokens: -1, ResetInputTokens: -1,
				LimitOutputTokens: -1, RemainingOutputTokens: -1, ResetOutputTokens: -1}},
		{"anthropic malformed reset", hdr("anthropic-ratelimit-requests-remaining", "3", "anthropic-ratelimit-requests-reset", "soon"),
			ratelimit.ProviderState{LimitRequests: -1, RemainingRequests: 3, ResetRequests: -1, LimitTokens: -1, RemainingTokens: -1, ResetTokens: -1,
				LimitInputTokens: -1, RemainingInputTokens: -1, ResetInputTokens: -1, LimitOutputTokens: -1, RemainingOutputTokens: -1, ResetOutputTokens: -1,
				TokensMostRestrictive: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ratelimit.ParseHeadersAt(tt.h, now); got != tt.want {
				t.Fatalf("want %+v\n got %+v", tt.want, got)
			}
		})
	}
}

// TestSyncAnthropic: Anthropic's remaining counts lower the bucket, and
// its 429 with retry-after empties it until then.
func TestSyncAnthropic(t *testing.T) {
	ctx := context.Background()
	b, clk, _ := newBucket(t, t.Name(), ratelimit.Limits{RequestsPerPeriod: 10, TokensPerPeriod: 1000, Period: time.Second})
	h := http.Header{}
	h.Set("anthropic-ratelimit-requests-remaining", "4")
	h.Set("anthropic-ratelimit-tokens-remaining", "300")
	if lowered, err := b.Sync(ctx, 200, h, 0); err != nil || !lowered {
		t.Fatalf("sync: %v %v", lowered, err)
	}
	if avail, _, _ := b.Available(ctx); avail.Tokens != 300 || avail.Requests != 4 {
		t.Fatalf("after sync: %+v, want 4 requests and 300 tokens", avail)
	}
	h = http.Header{}
	h.Set("retry-after", "2")
	h.Set("anthropic-ratelimit-requests-remaining", "0")
	if _, err := b.Sync(ctx, http.StatusTooManyRequests, h, 0); err != nil {
		t.Fatal(err)
	}
	clk.advance(1900 * time.Millisecond)
	if d, _ := b.Reserve(ctx, "x", ratelimit.Cost{Requests: 1}); d.Admitted {
		t.Fatal("admitted before retry-after")
	}
}
