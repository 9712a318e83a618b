package harness

import (
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/ratelimit"
)

// TestEndToEndTwoProviders runs the whole pipeline with summaries and
// chat on an Anthropic-compatible fake (Messages API, separate input and
// output token limits) and reviews on the OpenAI fake: every PR is
// published, neither fake answers a 429, and the Anthropic fake's
// requests, input tokens and output tokens each keep the interval rule
// (at most burst + rate·(b−a) in any [a,b]).
func TestEndToEndTwoProviders(t *testing.T) {
	const compress = 30
	per := time.Duration(float64(time.Minute) / compress)
	claude := config.ModelConfig{Name: "claude-haiku", Provider: "claude", RequestsPerMinute: 120, TokensPerMinute: 12000,
		MaxOutputTokens: 300, Period: config.Duration(per)}
	anthropicKey := "sk-ant-test-" + RandomHex(8)
	ant := fakeopenai.New(fakeopenai.Config{
		// each of its token limits equals prq's total-token limit: an
		// admission of input+output ≤ the total fits both
		Models: []fakeopenai.Model{{Name: claude.Name, RPM: claude.RequestsPerMinute, TPM: claude.TokensPerMinute,
			ITPM: claude.TokensPerMinute, OTPM: claude.TokensPerMinute, Latency: 800 * time.Millisecond / compress, Jitter: 400 * time.Millisecond / compress}},
		Period: per, Keys: []string{anthropicKey}, Seed: 2, Record: true,
	})
	antURL, closeAnt, err := ListenServe(ant)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAnt)

	s := startStack(t, stackOpts{compress: compress, providers: func(c *config.Config, f *Fakes) {
		c.Providers = []config.ProviderConfig{
			{Name: "openai", Kind: config.KindOpenAI, BaseURL: f.OpenAIURL, KeyEnv: config.EnvList{"OPENAI_API_KEY"}, Keys: []config.Secret{c.OpenAI.APIKey}},
			{Name: "claude", Kind: config.KindAnthropic, BaseURL: antURL, KeyEnv: config.EnvList{"ANTHROPIC_API_KEY"}, Keys: []config.Secret{config.Secret(anthropicKey)}},
		}
		c.OpenAI.BaseURL = "" // providers[].base_url says it
		for i := range c.Models {
			c.Models[i].Provider = "openai"
		}
		c.Models = append(c.Models, claude)
		c.Jobs.SummaryModel, c.Jobs.ChatModel = claude.Name, claude.Name
	}})
	runE2E(t, s, 9)

	antStats := ant.Stats()[claude.Name]
	if antStats.Requests == 0 {
		t.Fatal("no request reached the Anthropic fake: summaries did not go to their provider")
	}
	if antStats.RateLimited != 0 {
		t.Errorf("anthropic fake: %d 429s; prq must keep it at its limits, never over", antStats.RateLimited)
	}
	openai := s.fakes.OpenAI.Stats()
	if openai["gpt-4o"].Requests == 0 {
		t.Fatal("no review reached the OpenAI fake")
	}
	if n := openai["gpt-4o-mini"].Requests + openai[claude.Name].Requests; n != 0 {
		t.Errorf("%d summary or chat calls went to the OpenAI fake", n)
	}
	for model, st := range openai {
		if st.RateLimited != 0 {
			t.Errorf("openai fake %s: %d 429s", model, st.RateLimited)
		}
	}
	adm := ant.Admissions(claude.Name)
	dims := map[string]struct {
		cost  func(fakeopenai.Admission) int64
		limit int64
	}{
		"requests":      {func(fakeopenai.Admission) int64 { return 1 }, claude.RequestsPerMinute},
		"input tokens":  {func(a fakeopenai.Admission) int64 { return a.Input }, claude.TokensPerMinute},
		"output tokens": {func(a fakeopenai.Admission) int64 { return a.Output }, claude.TokensPerMinute},
	}
	for name, d := range dims {
		var xs []ratelimit.Admission
		for _, a := range adm {
			xs = append(xs, ratelimit.Admission{At: a.At, Cost: d.cost(a)})
		}
		rep := ratelimit.CheckIntervals(xs, d.limit, per, d.limit)
		t.Logf("anthropic %s: %d admissions, total %d, worst interval ratio %.3f, utilisation %.2f", name, rep.Admissions, rep.Total, rep.WorstRatio, rep.Utilisation)
		if rep.Violations != 0 {
			t.Errorf("anthropic %s: %d intervals over the limit", name, rep.Violations)
		}
	}
	if err := s.stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if logs := s.logs.String(); strings.Contains(logs, anthropicKey) || strings.Contains(logs, string(s.app.Config().OpenAI.APIKey)) {
		t.Fatal("a provider key reached the logs")
	}
}
