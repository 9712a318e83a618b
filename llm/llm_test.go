package llm_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/llm"
)

func TestClassification(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "m", RPM: 1000, TPM: 1000000, ContextTokens: 300}}, Keys: []string{"good"}})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c := llm.New("good", srv.URL+"/v1", 300*time.Millisecond, nil)
	ctx := context.Background()
	req := llm.Request{Model: "m", System: "Summarize.", User: "File: a.go\n   1 +x := 1", MaxOutput: 100}
	resp, err := c.Complete(ctx, req)
	if err != nil || resp.Text == "" || resp.PromptTokens == 0 || resp.Header.Get("x-ratelimit-remaining-tokens") == "" {
		t.Fatalf("ok call: %+v %v", resp, err)
	}
	cases := []struct {
		name   string
		faults fakeopenai.Faults
		key    string
		req    func(llm.Request) llm.Request
		want   error
	}{
		{"bad key", fakeopenai.Faults{}, "bad", nil, llm.ErrAccount},
		{"no quota", fakeopenai.Faults{NoQuota: true}, "good", nil, llm.ErrAccount},
		{"429", fakeopenai.Faults{TooMany: 1}, "good", nil, llm.ErrRateLimited},
		{"5xx", fakeopenai.Faults{ServerError: 1}, "good", nil, llm.ErrTransient},
		{"timeout", fakeopenai.Faults{Timeout: 1, TimeoutAfter: "5s"}, "good", nil, llm.ErrTransient},
		{"truncated", fakeopenai.Faults{Truncated: 1}, "good", nil, llm.ErrTransient},
		{"empty", fakeopenai.Faults{Empty: 1}, "good", nil, llm.ErrTransient},
		{"context", fakeopenai.Faults{}, "good", func(r llm.Request) llm.Request {
			for i := 0; i < 200; i++ {
				r.User += " token token"
			}
			return r
		}, llm.ErrContextLength},
		{"unknown model", fakeopenai.Faults{}, "good", func(r llm.Request) llm.Request { r.Model = "nope"; return r }, llm.ErrPermanent},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake.SetFaults(tc.faults)
			defer fake.SetFaults(fakeopenai.Faults{})
			r := req
			if tc.req != nil {
				r = tc.req(r)
			}
			_, err := llm.New(tc.key, srv.URL+"/v1", 300*time.Millisecond, nil).Complete(ctx, r)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			var e *llm.Error
			if tc.want == llm.ErrRateLimited && (!errors.As(err, &e) || e.Header.Get("retry-after-ms") == "") {
				t.Fatalf("a 429 must keep its headers for the bucket sync: %v", err)
			}
		})
	}
}

// TestContextAndCacheKey: a request's Context goes as a user message of
// its own between the system message and the user's, and its CacheKey
// as prompt_cache_key, which go-openai's request does not carry.
func TestContextAndCacheKey(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "m", RPM: 1000, TPM: 1000000}}, Keys: []string{"good"}, Record: true})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c := llm.New("good", srv.URL+"/v1", time.Second, nil)
	req := llm.Request{Model: "m", System: "Summarise.", Context: "Pull request: x", User: "File: a.go\n   1 +x := 1", MaxOutput: 50, CacheKey: "pr-7"}
	if _, err := c.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	req.CacheKey = ""
	if _, err := c.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	calls := fake.Calls()
	if len(calls) != 2 || calls[0].CacheKey != "pr-7" || calls[1].CacheKey != "" {
		t.Fatalf("prompt_cache_key: %+v", calls)
	}
	if calls[0].System != "Summarise." || calls[0].Prompt != "Pull request: x" {
		t.Fatalf("messages: system %q, first user %q", calls[0].System, calls[0].Prompt)
	}
	if got := req.Messages(); len(got) != 3 || got[1] != "Pull request: x" {
		t.Fatalf("Messages: %q", got)
	}
}
