package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/gateway"
	"github.com/prq-dev/prq/ratelimit"
)

const embeddingModel = "text-embedding-3-small"

// apiStack is serve + worker with an OpenAI fake (chat models and an
// embedding model) and an Anthropic fake (a Claude model).
func apiStack(t *testing.T) (*stack, *fakeopenai.Server, string) {
	const compress = 30
	per := time.Duration(float64(time.Minute) / compress)
	claude := config.ModelConfig{Name: "claude-haiku", Provider: "claude", RequestsPerMinute: 600,
		InputTokensPerMinute: 60000, OutputTokensPerMinute: 30000, MaxOutputTokens: 300, Period: config.Duration(per)}
	anthropicKey := "sk-ant-test-" + RandomHex(8)
	ant, antURL := startAnthropicFake(t, claude, per, anthropicKey, 800*time.Millisecond/compress)
	s := startStack(t, stackOpts{compress: compress,
		tune: func(c *config.Config) {
			c.Models = append(c.Models, config.ModelConfig{Name: embeddingModel, RequestsPerMinute: 3000, TokensPerMinute: 1000000, Period: config.Duration(per)})
		},
		providers: func(c *config.Config, f *Fakes) {
			c.Providers = []config.ProviderConfig{
				{Name: "openai", Kind: config.KindOpenAI, BaseURL: f.OpenAIURL, KeyEnv: config.EnvList{"OPENAI_API_KEY"}, Keys: []config.Secret{c.OpenAI.APIKey}},
				{Name: "claude", Kind: config.KindAnthropic, BaseURL: antURL, KeyEnv: config.EnvList{"ANTHROPIC_API_KEY"}, Keys: []config.Secret{config.Secret(anthropicKey)}},
			}
			c.OpenAI.BaseURL = ""
			for i := range c.Models {
				c.Models[i].Provider = "openai"
			}
			c.Models = append(c.Models, claude)
		}})
	return s, ant, claude.Name
}

func (s *stack) sdkClients(secret string) (openai.Client, anthropic.Client) {
	base := "http://" + s.app.ListenAddr()
	return openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey(secret), option.WithMaxRetries(0)),
		anthropic.NewClient(aoption.WithoutEnvironmentDefaults(), aoption.WithBaseURL(base+"/"), aoption.WithAPIKey(secret), aoption.WithMaxRetries(0))
}

// TestGatewayAPIsEndToEnd drives serve's gateway with the official SDKs
// against the fakes: Messages (native to the Anthropic fake, whole and
// streamed, with a forced tool), Responses (translated to the OpenAI
// fake's chat completions, whole and streamed) and embeddings; one key's
// quota holds exactly the usage of all three. Then 100 concurrent
// requests of one key mix the three APIs: the key never uses more than
// its quota, every refusal is a 403 with nothing sent, and requests
// whose quota was held by others in flight waited and were answered (the
// key uses at least 90% of its quota).
func TestGatewayAPIsEndToEnd(t *testing.T) {
	s, ant, claude := apiStack(t)
	ctx := context.Background()
	_, k, secret := s.gatewayKey(gateway.Spec{Name: "all-apis", Tier: "paid", QuotaTokens: 200000, QuotaPeriod: ratelimit.Day})
	oc, ac := s.sdkClients(secret)
	var usage int64
	schema := anthropic.ToolInputSchemaParam{Properties: map[string]any{"path": map[string]any{"type": "string"}}, Required: []string{"path"}}
	msg, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: anthropic.Model(claude), MaxTokens: 200,
		Tools: []anthropic.ToolUnionParam{anthropic.ToolUnionParamOfTool(schema, "read_file")}, ToolChoice: anthropic.ToolChoiceParamOfTool("read_file"),
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Open the README."))}})
	if err != nil || len(msg.Content) == 0 || msg.Content[0].Type != "tool_use" {
		t.Fatalf("messages with a tool: %v %+v", err, msg)
	}
	usage += msg.Usage.InputTokens + msg.Usage.OutputTokens
	st := ac.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: anthropic.Model(claude), MaxTokens: 100,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Summarise the change."))}})
	var acc anthropic.Message
	for st.Next() {
		acc.Accumulate(st.Current())
	}
	if st.Err() != nil || len(acc.Content) == 0 || acc.Content[0].Text == "" {
		t.Fatalf("messages stream: %v %+v", st.Err(), acc)
	}
	usage += acc.Usage.InputTokens + acc.Usage.OutputTokens
	resp, err := oc.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4o-mini", MaxOutputTokens: openai.Int(100),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("What changed?")}})
	if err != nil || resp.OutputText() == "" {
		t.Fatalf("responses: %v", err)
	}
	usage += resp.Usage.TotalTokens
	rs := oc.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "gpt-4o-mini", MaxOutputTokens: openai.Int(100),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Stream it.")}})
	var final responses.Response
	for rs.Next() {
		if ev := rs.Current(); ev.Type == "response.completed" {
			final = ev.Response
		}
	}
	if rs.Err() != nil || final.OutputText() == "" {
		t.Fatalf("responses stream: %v", rs.Err())
	}
	usage += final.Usage.TotalTokens
	emb, err := oc.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: embeddingModel, EncodingFormat: openai.EmbeddingNewParamsEncodingFormatBase64,
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a chunk of the design", "another one"}}})
	if err != nil || len(emb.Data) != 2 || len(emb.Data[0].Embedding) != 1536 {
		t.Fatalf("embeddings: %v", err)
	}
	usage += emb.Usage.TotalTokens
	if got := s.quotaUsed(k); got != usage {
		t.Fatalf("quota used %d, the replies' usage %d", got, usage)
	}

	// 100 concurrent requests of one key, the three APIs mixed
	_, mk, msecret := s.gatewayKey(gateway.Spec{Name: "mixed", Tier: "paid", QuotaTokens: 2000, QuotaPeriod: ratelimit.Day})
	oc, ac = s.sdkClients(msecret)
	calls := func() int64 {
		return ant.Stats()[claude].Requests + s.fakes.OpenAI.Stats()["gpt-4o-mini"].Requests + s.fakes.OpenAI.Stats()[embeddingModel].Requests
	}
	calls0 := calls()
	var mu sync.Mutex
	var answered, refused int
	var used int64
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			var tokens int64
			var err error
			text := fmt.Sprintf("Request %d: explain the diff.", i)
			switch i % 3 {
			case 0:
				p := anthropic.MessageNewParams{Model: anthropic.Model(claude), MaxTokens: 300, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))}}
				if i%2 == 0 {
					var m *anthropic.Message
					if m, err = ac.Messages.New(ctx, p); err == nil {
						tokens = m.Usage.InputTokens + m.Usage.OutputTokens
					}
				} else {
					st := ac.Messages.NewStreaming(ctx, p)
					var acc anthropic.Message
					for st.Next() {
						acc.Accumulate(st.Current())
					}
					err, tokens = st.Err(), acc.Usage.InputTokens+acc.Usage.OutputTokens
				}
			case 1:
				p := responses.ResponseNewParams{Model: "gpt-4o-mini", MaxOutputTokens: openai.Int(300), Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(text)}}
				if i%2 == 0 {
					var r *responses.Response
					if r, err = oc.Responses.New(ctx, p); err == nil {
						tokens = r.Usage.TotalTokens
					}
				} else {
					st := oc.Responses.NewStreaming(ctx, p)
					for st.Next() { // incomplete: cut at the cap the quota left
						if ev := st.Current(); ev.Type == "response.completed" || ev.Type == "response.incomplete" {
							tokens = ev.Response.Usage.TotalTokens
						}
					}
					err = st.Err()
				}
			default:
				var e *openai.CreateEmbeddingResponse
				if e, err = oc.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: embeddingModel, Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String(text)}}); err == nil {
					tokens = e.Usage.TotalTokens
				}
			}
			mu.Lock()
			defer mu.Unlock()
			var oe *openai.Error
			var ae *anthropic.Error
			switch {
			case err == nil:
				answered++
				used += tokens
			case errors.As(err, &oe) && oe.StatusCode == http.StatusForbidden, errors.As(err, &ae) && ae.StatusCode == http.StatusForbidden:
				refused++
			default:
				t.Errorf("request %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	got := s.quotaUsed(mk)
	t.Logf("100 mixed requests, quota 2000: %d answered, %d refused (403); %d tokens used", answered, refused, got)
	if got > 2000 || got != used {
		t.Fatalf("quota used %d of 2000; the answers' usage %d", got, used)
	}
	if got < 1800 {
		t.Fatalf("quota used %d of 2000: requests whose quota was held should have waited and been answered", got)
	}
	if n := calls() - calls0; n != int64(answered) {
		t.Fatalf("%d upstream calls for %d answers: refusals must send nothing", n, answered)
	}
}
