package harness

import (
	"fmt"
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
// (at most burst + rate·(b−a) in any [a,b]). The Claude model is
// configured as Anthropic limits it: input and output tokens per minute
// apart (no total), the output limit an eighth of the input's, so output
// binds; one total-token limit in their place (13,500) gets 429s from
// the output limit on this run (9 in one). Compressed 15× rather than 30×:
// with the output limit binding, a worker's lag from a call's start to
// the provider varying by tens of ms on a loaded machine (race detector,
// packages in parallel) is 30× more of the limit's refill; at 30× one
// run in a loaded suite met a 429 from that jitter alone.
func TestEndToEndTwoProviders(t *testing.T) {
	const compress = 15
	per := time.Duration(float64(time.Minute) / compress)
	claude := config.ModelConfig{Name: "claude-haiku", Provider: "claude", RequestsPerMinute: 120,
		InputTokensPerMinute: 12000, OutputTokensPerMinute: 1500, MaxOutputTokens: 300, Period: config.Duration(per)}
	anthropicKey := "sk-ant-test-" + RandomHex(8)
	ant, antURL := startAnthropicFake(t, claude, per, anthropicKey, 800*time.Millisecond/compress)

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

	checkAnthropicIntervals(t, ant, claude, per)
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
	if err := s.stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if logs := s.logs.String(); strings.Contains(logs, anthropicKey) || strings.Contains(logs, string(s.app.Config().OpenAI.APIKey)) {
		t.Fatal("a provider key reached the logs")
	}
}

// startAnthropicFake starts a fake in Anthropic mode for m: its input and
// output token limits are m's where m sets them, else each equals m's
// total-token limit (an admission of input+output within the total
// fits both).
func startAnthropicFake(t *testing.T, m config.ModelConfig, per time.Duration, key string, latency time.Duration) (*fakeopenai.Server, string) {
	t.Helper()
	ant := fakeopenai.New(fakeopenai.Config{
		Models: []fakeopenai.Model{{Name: m.Name, RPM: m.RequestsPerMinute, TPM: m.TokensPerMinute,
			ITPM: anthropicLimit(m.InputTokensPerMinute, m), OTPM: anthropicLimit(m.OutputTokensPerMinute, m), Latency: latency, Jitter: latency / 2}},
		Period: per, Keys: []string{key}, Seed: 2, Record: true,
	})
	url, closeFake, err := ListenServe(ant)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFake)
	return ant, url
}

// checkAnthropicIntervals: no 429 on the Anthropic fake, and each of its
// dimensions (requests, input tokens, output tokens) admitted at most
// burst + rate·(b−a) in every interval [a,b].
func checkAnthropicIntervals(t *testing.T, ant *fakeopenai.Server, m config.ModelConfig, per time.Duration) {
	t.Helper()
	st := ant.Stats()[m.Name]
	if st.Requests == 0 {
		t.Fatalf("no request reached the Anthropic fake's %s", m.Name)
	}
	if st.RateLimited != 0 {
		t.Errorf("anthropic fake: %d 429s; prq must keep it at its limits, never over", st.RateLimited)
	}
	adm := ant.Admissions(m.Name)
	dims := []struct {
		name  string
		cost  func(fakeopenai.Admission) int64
		limit int64
	}{
		{"requests", func(fakeopenai.Admission) int64 { return 1 }, m.RequestsPerMinute},
		{"input tokens", func(a fakeopenai.Admission) int64 { return a.Input }, anthropicLimit(m.InputTokensPerMinute, m)},
		{"output tokens", func(a fakeopenai.Admission) int64 { return a.Output }, anthropicLimit(m.OutputTokensPerMinute, m)},
	}
	for _, d := range dims {
		var xs []ratelimit.Admission
		for _, a := range adm {
			xs = append(xs, ratelimit.Admission{At: a.At, Cost: d.cost(a)})
		}
		rep := ratelimit.CheckIntervals(xs, d.limit, per, d.limit)
		t.Logf("anthropic %s: %d admissions, total %d, worst interval ratio %.3f, utilisation %.2f", d.name, rep.Admissions, rep.Total, rep.WorstRatio, rep.Utilisation)
		if rep.Violations != 0 {
			t.Errorf("anthropic %s: %d intervals over the limit", d.name, rep.Violations)
		}
	}
}

// anthropicLimit is an input or output limit of m: its own, else m's
// total-token limit.
func anthropicLimit(own int64, m config.ModelConfig) int64 {
	if own > 0 {
		return own
	}
	return m.TokensPerMinute
}

// TestEndToEndAzureAndAnthropicReviews: summaries and chat on the Azure
// mode of the fake (deployment paths, api-version, api-key) and reviews
// on the Anthropic fake asked for as strict JSON through a forced tool.
// Its input limit binds: Anthropic counts the tool's schema and its
// tool-use prompt as input, and so must prq's estimate
// (workers.Model.SchemaIsInput). The limit (3,000) is below the largest
// review of the generated PRs (~3,800 tokens whole): the planner must cut
// it into parts each admissible (workers.Model.Limits), or admission
// drops it as never fitting and its PR is never published (the run
// times out).
func TestEndToEndAzureAndAnthropicReviews(t *testing.T) {
	const compress = 30
	per := time.Duration(float64(time.Minute) / compress)
	claude := config.ModelConfig{Name: "claude-sonnet", Provider: "claude", RequestsPerMinute: 120, InputTokensPerMinute: 3000,
		OutputTokensPerMinute: 24000, MaxOutputTokens: 600, Period: config.Duration(per), OutputFormat: "json_schema"}
	anthropicKey := "sk-ant-test-" + RandomHex(8)
	ant, antURL := startAnthropicFake(t, claude, per, anthropicKey, 2*time.Second/compress)
	s := startStack(t, stackOpts{compress: compress, providers: func(c *config.Config, f *Fakes) {
		c.Providers = []config.ProviderConfig{
			{Name: "azure", Kind: config.KindAzure, BaseURL: strings.TrimSuffix(f.OpenAIURL, "/v1"), APIVersion: "2024-10-21",
				KeyEnv: config.EnvList{"AZURE_OPENAI_API_KEY"}, Keys: []config.Secret{c.OpenAI.APIKey}},
			{Name: "claude", Kind: config.KindAnthropic, BaseURL: antURL, KeyEnv: config.EnvList{"ANTHROPIC_API_KEY"}, Keys: []config.Secret{config.Secret(anthropicKey)}},
		}
		c.OpenAI.BaseURL = ""
		for i := range c.Models {
			c.Models[i].Provider = "azure"
		}
		c.Models = append(c.Models, claude)
		c.Jobs.ReviewModel = claude.Name
	}})
	runE2E(t, s, 6)
	checkAnthropicIntervals(t, ant, claude, per)
	if st := ant.Stats()[claude.Name]; st.ResponseFormats["tool:true"] != st.Requests {
		t.Errorf("reviews asked for without the tool: %v of %d", st.ResponseFormats, st.Requests)
	}
	for model, st := range s.fakes.OpenAI.Stats() {
		if st.RateLimited != 0 {
			t.Errorf("azure fake %s: %d 429s", model, st.RateLimited)
		}
	}
	if s.fakes.OpenAI.Stats()["gpt-4o-mini"].Requests == 0 {
		t.Fatal("no summary reached the Azure fake")
	}
}

// TestEndToEndThreeKeys: summaries and chat on a model whose provider
// lists three keys (key_env a list), on a fake that limits each key by
// itself: the whole pipeline completes, every key carries calls, no key
// sees a 429, and each key's requests and tokens keep the interval rule
// of its own limit (the model's limits are per key).
func TestEndToEndThreeKeys(t *testing.T) {
	const compress = 30
	per := time.Duration(float64(time.Minute) / compress)
	// each key's limit is well under the run's load (~40k tokens of
	// summaries and chat): the keys are needed, and their limits bind
	m := config.ModelConfig{Name: "gpt-keys", Provider: "org", RequestsPerMinute: 120, TokensPerMinute: 8000,
		MaxOutputTokens: 300, Period: config.Duration(per)}
	keys := []string{"sk-org-a-" + RandomHex(8), "sk-org-b-" + RandomHex(8), "sk-org-c-" + RandomHex(8)}
	fake := fakeopenai.New(fakeopenai.Config{
		Models: []fakeopenai.Model{{Name: m.Name, RPM: m.RequestsPerMinute, TPM: m.TokensPerMinute, Latency: 800 * time.Millisecond / compress, Jitter: 400 * time.Millisecond / compress}},
		Period: per, Keys: keys, Seed: 3, Record: true,
	})
	s := stackWithProvider(t, compress, fake, "org", keys, m, func(c *config.Config) {
		c.Jobs.SummaryModel, c.Jobs.ChatModel = m.Name, m.Name
	})
	runE2E(t, s, 6)

	st := fake.Stats()[m.Name]
	if st.RateLimited != 0 {
		t.Errorf("the three-key fake answered %d 429s", st.RateLimited)
	}
	byKey := map[string][]ratelimit.Admission{}
	for _, a := range fake.Admissions(m.Name) {
		byKey[a.Key] = append(byKey[a.Key], ratelimit.Admission{At: a.At, Cost: a.Cost})
	}
	for i, k := range keys {
		adm := byKey[fakeopenai.KeyLabel(k)]
		if len(adm) == 0 {
			t.Errorf("key %d carried no call", i)
			continue
		}
		reqs := make([]ratelimit.Admission, len(adm))
		for j, a := range adm {
			reqs[j] = ratelimit.Admission{At: a.At, Cost: 1}
		}
		tok := ratelimit.CheckIntervals(adm, m.TokensPerMinute, per, m.TokensPerMinute)
		req := ratelimit.CheckIntervals(reqs, m.RequestsPerMinute, per, m.RequestsPerMinute)
		t.Logf("key %d: %d calls, %d tokens, worst interval %.3f of its token limit, %.3f of its request limit, utilisation %.3f", i, tok.Admissions, tok.Total, tok.WorstRatio, req.WorstRatio, tok.Utilisation)
		if tok.Violations != 0 || req.Violations != 0 {
			t.Errorf("key %d: %d token and %d request intervals over its limit", i, tok.Violations, req.Violations)
		}
	}
	if err := s.stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	logs := s.logs.String()
	for _, k := range keys {
		if strings.Contains(logs, k) {
			t.Fatal("a provider key reached the logs")
		}
	}
}

// stackWithProvider serves fake on loopback and starts a stack with two
// OpenAI-kind providers: "openai", the default fakes' (every default
// model), and name, fake with keys (environment NAME_KEY_0, ...), which
// serves m; tune then sets which jobs use m.
func stackWithProvider(t *testing.T, compress float64, fake *fakeopenai.Server, name string, keys []string, m config.ModelConfig, tune func(*config.Config)) *stack {
	t.Helper()
	url, closeFake, err := ListenServe(fake)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFake)
	m.Provider = name
	return startStack(t, stackOpts{compress: compress, providers: func(c *config.Config, f *Fakes) {
		p := config.ProviderConfig{Name: name, Kind: config.KindOpenAI, BaseURL: url}
		for i, k := range keys {
			p.KeyEnv = append(p.KeyEnv, fmt.Sprintf("%s_KEY_%d", strings.ToUpper(name), i))
			p.Keys = append(p.Keys, config.Secret(k))
		}
		c.Providers = []config.ProviderConfig{
			{Name: "openai", Kind: config.KindOpenAI, BaseURL: f.OpenAIURL, KeyEnv: config.EnvList{"OPENAI_API_KEY"}, Keys: []config.Secret{c.OpenAI.APIKey}},
			p,
		}
		c.OpenAI.BaseURL = ""
		for i := range c.Models {
			c.Models[i].Provider = "openai"
		}
		c.Models = append(c.Models, m)
		tune(c)
	}})
}
