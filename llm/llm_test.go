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
