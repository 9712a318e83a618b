package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/gateway"
	"github.com/prq-dev/prq/jobs"
)

// TestGatewayServesEveryProvider: prq gateway's handler, built from a
// configuration with two OpenAI, an Azure and an Anthropic provider,
// lists every configured model and forwards each to its own provider
// (the Azure model to its configured deployment, the Anthropic model
// translated), admitted by the process's scheduler.
func TestGatewayServesEveryProvider(t *testing.T) {
	fake := func(cfg fakeopenai.Config) (*fakeopenai.Server, string) {
		f := fakeopenai.New(cfg)
		srv := httptest.NewServer(f)
		t.Cleanup(srv.Close)
		return f, srv.URL
	}
	oa, oaURL := fake(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "gpt-4o-mini", RPM: 500, TPM: 200000}, {Name: "gpt-4o", RPM: 500, TPM: 30000}}, Keys: []string{"sk-oa"}})
	oa2, oa2URL := fake(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "gpt-4o", RPM: 500, TPM: 30000}}, Keys: []string{"sk-oa2"}})
	az, azURL := fake(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "gpt-4o-eu", RPM: 500, TPM: 30000}}, Keys: []string{"az-key"},
		Deployments: map[string]string{"review-eu": "gpt-4o-eu"}})
	ant, antURL := fake(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "claude-haiku", RPM: 500, TPM: 30000, ITPM: 20000, OTPM: 10000}}, Keys: []string{"sk-ant"}})
	s, _ := newTestServer(t, func(c *config.Config) {
		c.Providers = []config.ProviderConfig{
			{Name: "openai", Kind: config.KindOpenAI, BaseURL: oaURL + "/v1", KeyEnv: config.EnvList{"OPENAI_API_KEY"}, Keys: []config.Secret{"sk-oa"}},
			{Name: "openai2", Kind: config.KindOpenAI, BaseURL: oa2URL + "/v1", KeyEnv: config.EnvList{"OPENAI2_API_KEY"}, Keys: []config.Secret{"sk-oa2"}},
			{Name: "azure", Kind: config.KindAzure, BaseURL: azURL, APIVersion: "2024-10-21", KeyEnv: config.EnvList{"AZURE_OPENAI_API_KEY"}, Keys: []config.Secret{"az-key"},
				Deployments: map[string]string{"gpt-4o-eu": "review-eu"}},
			{Name: "claude", Kind: config.KindAnthropic, BaseURL: antURL, KeyEnv: config.EnvList{"ANTHROPIC_API_KEY"}, Keys: []config.Secret{"sk-ant"}},
		}
		for i := range c.Models {
			c.Models[i].Provider = "openai"
			if c.Models[i].Name == "gpt-4o" {
				c.Models[i].Provider = "openai2" // a second OpenAI-kind provider
			}
		}
		c.Models = append(c.Models,
			config.ModelConfig{Name: "gpt-4o-eu", Provider: "azure", RequestsPerMinute: 500, TokensPerMinute: 30000, MaxOutputTokens: 256},
			config.ModelConfig{Name: "claude-haiku", Provider: "claude", RequestsPerMinute: 500, InputTokensPerMinute: 20000, OutputTokensPerMinute: 10000, MaxOutputTokens: 256})
	})
	ctx, cancel := context.WithCancel(context.Background())
	h, err := s.GatewayHandler(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.sched.Run(ctx, admission.RunConfig{Capacity: func() int { return 8 }, Queues: jobs.Queues})
	}()
	srv := httptest.NewServer(h)
	defer func() { srv.Close(); cancel(); <-done }()
	secret, _, err := gateway.NewKeys(s.rdb).Create(ctx, gateway.Spec{Name: "wiring", Tier: "paid"})
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, body string) (int, []byte) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var b json.RawMessage
		json.NewDecoder(res.Body).Decode(&b)
		return res.StatusCode, b
	}
	code, b := do(http.MethodGet, "/v1/models", "")
	for _, m := range []string{"gpt-4o-mini", "gpt-4o", "gpt-4o-eu", "claude-haiku"} {
		if code != http.StatusOK || !strings.Contains(string(b), `"id":"`+m+`"`) {
			t.Fatalf("/v1/models: %d %s, want %s listed", code, b, m)
		}
	}
	for _, c := range []struct {
		model string
		fake  *fakeopenai.Server
	}{{"gpt-4o-mini", oa}, {"gpt-4o", oa2}, {"gpt-4o-eu", az}, {"claude-haiku", ant}} {
		code, b := do(http.MethodPost, "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"max_tokens":40,"messages":[{"role":"user","content":"hello"}]}`, c.model))
		var reply struct {
			Object  string `json:"object"`
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		json.Unmarshal(b, &reply)
		if code != http.StatusOK || reply.Object != "chat.completion" || len(reply.Choices) != 1 || reply.Choices[0].Message.Content == "" {
			t.Fatalf("%s: %d %s", c.model, code, b)
		}
		if st := c.fake.Stats()[c.model]; st.Requests != 1 || st.RateLimited != 0 {
			t.Fatalf("%s: its provider saw %d requests, %d 429s; want 1 and none", c.model, st.Requests, st.RateLimited)
		}
	}
	if n := oa.Stats()["gpt-4o"].Requests; n != 0 {
		t.Fatalf("gpt-4o went to the first OpenAI provider %d times; it is the second's", n)
	}
}
