package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/llm"
)

// TestAnthropic: the SDK client against the fake's Anthropic mode: a
// review through a forced tool comes back as the tool's JSON input, with
// usage and the rate-limit headers; failures are classified as
// Anthropic documents its statuses.
func TestAnthropic(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "claude", RPM: 1000, TPM: 1000000, ContextTokens: 600}},
		Period: time.Hour, Keys: []string{"sk-ant-good"}})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ctx := context.Background()
	c := llm.NewAnthropic("sk-ant-good", srv.URL, 2*time.Second, nil)
	req := llm.Request{Model: "claude", System: `Review the file; answer with "comments".`, User: "File: a.go\n   3 +x := 1\n   4 +y := 2", MaxOutput: 300,
		Format: llm.Format{Type: llm.FormatJSONSchema, Name: "file_review", Schema: json.RawMessage(reviewSchema)}}
	resp, err := c.Complete(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Summary  string `json:"summary"`
		Comments []struct {
			Line int `json:"line"`
		} `json:"comments"`
	}
	if err := json.Unmarshal([]byte(resp.Text), &got); err != nil || got.Summary == "" || len(got.Comments) == 0 {
		t.Fatalf("review %q: %v", resp.Text, err)
	}
	if resp.PromptTokens <= 0 || resp.OutputTokens <= 0 || resp.FinishReason != "stop" || resp.Header.Get("anthropic-ratelimit-tokens-remaining") == "" {
		t.Fatalf("response %+v", resp)
	}
	if st := fake.Stats()["claude"]; st.ResponseFormats["tool:true"] != 1 {
		t.Fatalf("the review was not asked for through a tool: %v", st.ResponseFormats)
	}
	plain := llm.Request{Model: "claude", System: "Summarize.", User: "File: a.go\n   1 +x := 1", MaxOutput: 100}
	if resp, err := c.Complete(ctx, plain); err != nil || resp.Text == "" {
		t.Fatalf("summary: %+v %v", resp, err)
	}
	cases := []struct {
		name   string
		faults fakeopenai.Faults
		key    string
		req    func(llm.Request) llm.Request
		want   error
	}{
		{"bad key", fakeopenai.Faults{}, "sk-ant-bad", nil, llm.ErrAccount},
		{"429", fakeopenai.Faults{TooMany: 1}, "sk-ant-good", nil, llm.ErrRateLimited},
		{"529 overloaded", fakeopenai.Faults{ServerError: 1}, "sk-ant-good", nil, llm.ErrTransient},
		{"prompt too long", fakeopenai.Faults{}, "sk-ant-good", func(r llm.Request) llm.Request {
			for i := 0; i < 500; i++ { // past the 600-token context
				r.User += " token token"
			}
			return r
		}, llm.ErrContextLength},
		{"unknown model", fakeopenai.Faults{}, "sk-ant-good", func(r llm.Request) llm.Request { r.Model = "nope"; return r }, llm.ErrPermanent},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake.SetFaults(tc.faults)
			defer fake.SetFaults(fakeopenai.Faults{})
			r := plain
			if tc.req != nil {
				r = tc.req(r)
			}
			_, err := llm.NewAnthropic(tc.key, srv.URL, 2*time.Second, nil).Complete(ctx, r)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			var e *llm.Error
			if tc.want == llm.ErrRateLimited && (!errors.As(err, &e) || e.Header.Get("retry-after") == "" || e.Code != "rate_limit_error") {
				t.Fatalf("a 429 must keep its headers for the bucket sync: %#v", err)
			}
		})
	}
}

// TestAzure: go-openai's Azure configuration against the fake's Azure
// mode: the deployment mapping, api-version and api-key.
func TestAzure(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "gpt-4o", RPM: 2, TPM: 100000}},
		Period: time.Hour, Keys: []string{"az-good"}, Deployments: map[string]string{"prod-4o": "gpt-4o"}})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ctx := context.Background()
	dep := func(string) string { return "prod-4o" }
	req := llm.Request{Model: "gpt-4o", System: "Summarize.", User: "File: a.go\n   1 +x := 1", MaxOutput: 50}
	resp, err := llm.NewAzure("az-good", srv.URL, "2024-10-21", dep, 2*time.Second, nil).Complete(ctx, req)
	if err != nil || resp.Text == "" || resp.Header.Get("x-ratelimit-remaining-tokens") == "" {
		t.Fatalf("azure call: %+v %v", resp, err)
	}
	// without the mapping the model's name is the deployment, unknown here
	if _, err := llm.NewAzure("az-good", srv.URL, "2024-10-21", nil, 2*time.Second, nil).Complete(ctx, req); !errors.Is(err, llm.ErrPermanent) {
		t.Fatalf("unknown deployment: got %v, want a permanent failure", err)
	}
	if _, err := llm.NewAzure("az-bad", srv.URL, "2024-10-21", dep, 2*time.Second, nil).Complete(ctx, req); !errors.Is(err, llm.ErrAccount) {
		t.Fatalf("bad api-key: got %v, want an account problem", err)
	}
	if _, err := llm.NewAzure("az-good", srv.URL, "2024-10-21", dep, 2*time.Second, nil).Complete(ctx, req); err != nil {
		t.Fatalf("second request of 2 per period: %v", err)
	}
	_, err = llm.NewAzure("az-good", srv.URL, "2024-10-21", dep, 2*time.Second, nil).Complete(ctx, req)
	var e *llm.Error
	if !errors.Is(err, llm.ErrRateLimited) || !errors.As(err, &e) || e.Header.Get("retry-after-ms") == "" {
		t.Fatalf("third request of 2 per period: got %v, want a 429 with retry-after-ms", err)
	}
}
