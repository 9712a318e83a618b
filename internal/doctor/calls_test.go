package doctor_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/doctor"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
)

// TestCallsReachAzureAndAnthropic: providers other than the first
// OpenAI one are checked through prq's own clients against the fake's
// Anthropic and Azure modes: a model that answers passes, with its
// limits compared per dimension (an input limit configured above the
// account's fails, naming the setting); a refused key, an unknown
// Anthropic model and a missing Azure deployment each fail with a fix
// for their cause; no key reaches a result.
func TestCallsReachAzureAndAnthropic(t *testing.T) {
	const antKey, azKey = "sk-ant-doctor-0123456789", "azure-doctor-key-0123456789"
	fake := fakeopenai.New(fakeopenai.Config{Keys: []string{antKey, azKey}, Models: []fakeopenai.Model{
		{Name: "claude-haiku", RPM: 50, ITPM: 20000, OTPM: 4000},
		{Name: "gpt-4o", RPM: 500, TPM: 30000}}})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	ant := func(key string) llm.Completer { return llm.NewAnthropic(key, srv.URL, 10*time.Second, nil) }
	az := func(key string) llm.Completer {
		return llm.NewAzure(key, srv.URL, "2024-10-21", nil, 10*time.Second, nil)
	}

	// limits on a compressed period (the demo's): doctor compares them per minute
	claude := doctor.Model{Name: "claude-haiku", Limits: &ratelimit.Limits{Period: 6 * time.Second,
		RequestsPerPeriod: 5, InputTokensPerPeriod: 2000, OutputTokensPerPeriod: 400}}
	over := claude
	over.Limits = &ratelimit.Limits{Period: 6 * time.Second, RequestsPerPeriod: 5, InputTokensPerPeriod: 4000, OutputTokensPerPeriod: 400}
	rs := doctor.Run(context.Background(), doctor.Input{Calls: []doctor.Call{
		{Provider: "claude", Kind: "anthropic", APIKey: antKey, Client: ant(antKey), Models: []doctor.Model{claude}},
		{Provider: "claude-over", Kind: "anthropic", APIKey: antKey, Client: ant(antKey), Models: []doctor.Model{over}},
		{Provider: "claude-badkey", Kind: "anthropic", Key: "key 2, 0123abcd", APIKey: "sk-ant-wrong-0123456789", Client: ant("sk-ant-wrong-0123456789"), Models: []doctor.Model{claude}},
		{Provider: "claude-unknown", Kind: "anthropic", APIKey: antKey, Client: ant(antKey), Models: []doctor.Model{{Name: "claude-nonesuch"}}},
		{Provider: "azure", Kind: "azure", APIKey: azKey, Client: az(azKey), Models: []doctor.Model{{Name: "gpt-4o", Limits: perMinute(500, 30000)}}},
		{Provider: "azure-missing", Kind: "azure", APIKey: azKey, Client: az(azKey), Models: []doctor.Model{{Name: "gpt-4o-nodeploy"}}},
	}})
	got := byName(rs)
	for name, want := range map[string]struct {
		ok      bool
		in, fix string
	}{
		"provider claude model claude-haiku":                          {true, "callable", ""},
		"provider claude limits claude-haiku":                         {true, "20000 input and 4000 output", ""},
		"provider claude-over limits claude-haiku":                    {false, "input_tokens_per_minute 40000 > provider's 20000", "input_tokens_per_minute: 20000"},
		"provider claude-badkey model claude-haiku (key 2, 0123abcd)": {false, "refused the key", "key_env"},
		"provider claude-unknown model claude-nonesuch":               {false, "refused the call", "model id"},
		"provider azure model gpt-4o":                                 {true, "callable", ""},
		"provider azure limits gpt-4o":                                {true, "not verified", ""}, // Azure sends no limit headers on chat completions
		"provider azure-missing model gpt-4o-nodeploy":                {false, "refused the call", "deployment"},
	} {
		r, ok := got[name]
		if !ok {
			t.Errorf("no result %q (have %v)", name, names(rs))
			continue
		}
		if r.OK != want.ok || !strings.Contains(r.Detail, want.in) || !strings.Contains(r.Fix, want.fix) {
			t.Errorf("%s: ok %v, %q; fix %q", name, r.OK, r.Detail, r.Fix)
		}
	}
	for _, r := range rs {
		if strings.Contains(r.Detail+r.Fix, "doctor-0123456789") || strings.Contains(r.Detail+r.Fix, "wrong-0123456789") {
			t.Fatalf("a key reached a result: %+v", r)
		}
	}
}
