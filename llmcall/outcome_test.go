package llmcall_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
)

// A raw reply (the gateway's) and the client's classified error (the
// workers') read as the same outcome.
func TestReplyOutcome(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		body   string
		flex   bool
		want   llmcall.Outcome
	}{
		{"ok", 200, `{}`, false, llmcall.OK},
		{"rate limited", 429, `{"error":{"type":"requests","code":"rate_limit_exceeded","message":"Rate limit reached"}}`, false, llmcall.RateLimited},
		{"no quota", 429, `{"error":{"type":"insufficient_quota","code":"insufficient_quota","message":"You exceeded your current quota"}}`, false, llmcall.AccountModel},
		{"bad key", 401, `{"error":{"type":"invalid_request_error","code":"invalid_api_key","message":"Incorrect API key"}}`, false, llmcall.AccountModel},
		{"forbidden", 403, `{"error":{"type":"permission_error","message":"not allowed"}}`, false, llmcall.AccountModel},
		{"billing", 402, `not json`, false, llmcall.AccountModel},
		{"context", 400, `{"error":{"code":"context_length_exceeded","message":"This model's maximum context length is 8192 tokens"}}`, false, llmcall.ContextLength},
		{"anthropic prompt too long", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`, false, llmcall.ContextLength},
		{"too large", 413, ``, false, llmcall.ContextLength},
		{"bad request", 400, `{"error":{"message":"bad"}}`, false, llmcall.Permanent},
		{"server", 503, ``, false, llmcall.Transient},
		{"overloaded", 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, false, llmcall.Transient},
		{"flex refused", 429, `{"error":{"type":"resource_unavailable","message":"Resource Unavailable"}}`, true, llmcall.FlexRefused},
		{"flex rate limited", 429, `{"error":{"code":"rate_limit_exceeded","message":"Rate limit reached"}}`, true, llmcall.RateLimited},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := llmcall.ReplyOutcome(tc.status, []byte(tc.body), tc.flex); got != tc.want {
				t.Errorf("ReplyOutcome = %v, want %v", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		err  error
		want llmcall.Outcome
	}{
		{nil, llmcall.OK},
		{&llm.Error{Kind: llm.ErrRateLimited}, llmcall.RateLimited},
		{fmt.Errorf("wrapped: %w", &llm.Error{Kind: llm.ErrAccount}), llmcall.AccountModel},
		{&llm.Error{Kind: llm.ErrContextLength}, llmcall.ContextLength},
		{&llm.Error{Kind: llm.ErrPermanent}, llmcall.Permanent},
		{&llm.Error{Kind: llm.ErrFlexUnavailable}, llmcall.FlexRefused},
		{errors.New("connection reset"), llmcall.Transient},
	} {
		if got := llmcall.OutcomeOf(tc.err); got != tc.want {
			t.Errorf("OutcomeOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// The one settle rule, outcome by outcome.
func TestSettleRule(t *testing.T) {
	t.Parallel()
	m := llmcall.Model{Name: "m", Prices: llm.Prices{Input: 1, CachedInput: 0.5, Output: 2}, CachedInputFree: true}
	r := &llm.Response{PromptTokens: 100, CachedTokens: 60, OutputTokens: 20}
	kept := ratelimit.Cost{Requests: 1, Tokens: 500}
	for _, tc := range []struct {
		o    llmcall.Outcome
		r    *llm.Response
		want llmcall.Settlement
	}{
		{llmcall.OK, r, llmcall.Settlement{Bucket: ratelimit.Cost{Requests: 1, Tokens: 60, Input: 40, Output: 20}, Tokens: 120, Nano: 110000, Dollars: 0.00011, Lane: llmcall.LaneSync}},
		{llmcall.OK, nil, llmcall.Settlement{Bucket: kept, InFull: true}},
		{llmcall.Transient, nil, llmcall.Settlement{Bucket: kept, InFull: true}},
		{llmcall.RateLimited, nil, llmcall.Settlement{Bucket: kept}},
		{llmcall.ContextLength, nil, llmcall.Settlement{Bucket: kept}},
		{llmcall.Permanent, nil, llmcall.Settlement{Bucket: kept}},
		{llmcall.AccountModel, nil, llmcall.Settlement{}},
		{llmcall.AccountKey, nil, llmcall.Settlement{}},
		{llmcall.FlexRefused, nil, llmcall.Settlement{}},
	} {
		got := m.Settle(tc.o, tc.r, 500, false)
		if d := got.Dollars - tc.want.Dollars; d > 1e-12 || d < -1e-12 {
			t.Errorf("%v: dollars %g, want %g", tc.o, got.Dollars, tc.want.Dollars)
		}
		got.Dollars, tc.want.Dollars = 0, 0
		if got != tc.want {
			t.Errorf("%v: settled %+v, want %+v", tc.o, got, tc.want)
		}
	}
	flex := *r
	flex.ServiceTier = llm.ServiceTierFlex
	if st := m.Settle(llmcall.OK, &flex, 500, false); st.Lane != llmcall.LaneFlex {
		t.Errorf("a flex reply's lane is %q", st.Lane)
	}
	if st := m.Settle(llmcall.OK, r, 500, true); st.Lane != llmcall.LaneBatch || st.Nano >= m.Settle(llmcall.OK, r, 500, false).Nano {
		t.Errorf("a batch reply: lane %q, %d nano-dollars (not at the batch prices)", st.Lane, st.Nano)
	}
}

// A provider that counts cache reads toward its limits is settled with
// them; one that does not, without.
func ExampleModel_Usage() {
	r := llm.Response{PromptTokens: 1000, CachedTokens: 800, OutputTokens: 50}
	fmt.Println(llmcall.Model{Name: "gpt-4o-mini"}.Usage(r))
	fmt.Println(llmcall.Model{Name: "claude-sonnet-4", CachedInputFree: true}.Usage(r))
	// Output:
	// {1 1050 1000 50}
	// {1 250 200 50}
}

// A provider's failure reads as one outcome, whichever path saw it.
func ExampleReplyOutcome() {
	fmt.Println(llmcall.ReplyOutcome(429, []byte(`{"error":{"code":"insufficient_quota"}}`), false))
	fmt.Println(llmcall.ReplyOutcome(429, []byte(`{"error":{"code":"rate_limit_exceeded"}}`), false))
	fmt.Println(llmcall.ReplyOutcome(500, nil, false))
	// Output:
	// account
	// rate_limited
	// transient
}
