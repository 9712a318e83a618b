package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const twoProviders = `
providers:
  - name: claude
    kind: anthropic
    key_env: ANTHROPIC_API_KEY
  - name: azure-eu
    kind: azure
    base_url: https://example-eu.openai.azure.com
    api_version: "2024-10-21"
    key_env: [AZURE_OPENAI_API_KEY]
    deployments: {gpt-4o: prod-4o}
models:
  - {name: claude-haiku, provider: claude, requests_per_minute: 50, tokens_per_minute: 50000}
  - {name: gpt-4o, provider: azure-eu, requests_per_minute: 60, tokens_per_minute: 30000}
jobs: {summary_model: claude-haiku, review_model: gpt-4o, chat_model: claude-haiku}
`

func loadYAML(t *testing.T, doc string, env map[string]string) *Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "prq.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(func(k string) string {
		if k == "PRQ_CONFIG" {
			return path
		}
		return env[k]
	}, nil)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return c
}

func TestProvidersResolve(t *testing.T) {
	const anthropicKey, azureKey = "sk-ant-Zq81x0Lm3Kp", "az-9Qf3vB7nX2wR"
	c := loadYAML(t, twoProviders, map[string]string{"ANTHROPIC_API_KEY": anthropicKey, "AZURE_OPENAI_API_KEY": azureKey})
	if err := c.Validate(ModeCheck); err != nil {
		t.Fatalf("validate: %v", err)
	}
	p, ok := c.ProviderOf("claude-haiku")
	if !ok || p.Kind != KindAnthropic || p.Key() != anthropicKey {
		t.Fatalf("claude-haiku: %+v %v", p.Name, ok)
	}
	p, ok = c.ProviderOf("gpt-4o")
	if !ok || p.Kind != KindAzure || p.Key() != azureKey || p.Deployment("gpt-4o") != "prod-4o" || p.Deployment("other") != "other" {
		t.Fatalf("gpt-4o: %+v %v", p.Name, ok)
	}
	for _, key := range []string{anthropicKey, azureKey} {
		if out := c.Redacted(); strings.Contains(out, key[:8]) {
			t.Fatalf("the redacted configuration shows a key:\n%s", out)
		}
	}
}

// TestSeveralKeys: a provider's key_env may list several variables; the
// keys come in that order (admission's key indices), and the single form
// keeps meaning one key.
func TestSeveralKeys(t *testing.T) {
	doc := strings.Replace(twoProviders, "key_env: ANTHROPIC_API_KEY", "key_env: [ANT_KEY_A, ANT_KEY_B, ANT_KEY_C]", 1)
	c := loadYAML(t, doc, map[string]string{"ANT_KEY_A": "sk-ant-a1", "ANT_KEY_B": "sk-ant-b2", "ANT_KEY_C": "sk-ant-c3", "AZURE_OPENAI_API_KEY": "az-1"})
	if err := c.Validate(ModeCheck); err != nil {
		t.Fatalf("validate: %v", err)
	}
	p, _ := c.ProviderOf("claude-haiku")
	if got := strings.Join(p.KeyValues(), ","); got != "sk-ant-a1,sk-ant-b2,sk-ant-c3" || p.Key() != "sk-ant-a1" {
		t.Fatalf("keys %q (first %q)", got, p.Key())
	}
	if p, _ := c.ProviderOf("gpt-4o"); len(p.KeyValues()) != 1 || p.Key() != "az-1" {
		t.Fatalf("azure keys %d", len(p.KeyValues()))
	}
	if out := c.Redacted(); strings.Contains(out, "sk-ant-b2") {
		t.Fatalf("the redacted configuration shows a key:\n%s", out)
	}
}

// TestImplicitProvider: a configuration without providers keeps working
// as one OpenAI provider made from OPENAI_API_KEY and OPENAI_BASE_URL.
func TestImplicitProvider(t *testing.T) {
	c, err := Load(func(k string) string {
		return map[string]string{"OPENAI_API_KEY": "sk-implicit-1234", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}[k]
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(ModeCheck); err != nil {
		t.Fatalf("validate: %v", err)
	}
	for _, m := range c.Models {
		p, ok := c.ProviderOf(m.Name)
		if !ok || p.Name != ImplicitProvider || p.Kind != KindOpenAI || p.Key() != "sk-implicit-1234" || p.BaseURL != "http://127.0.0.1:9/v1" {
			t.Fatalf("%s: %+v %v", m.Name, p, ok)
		}
	}
}

func TestProvidersValidate(t *testing.T) {
	const key = "sk-ant-Hq8vLm2TzzzzX"
	tests := []struct {
		name, doc string
		env       map[string]string
		mode      Mode
		want      string // in the error
	}{
		{"unknown provider", strings.Replace(twoProviders, "provider: claude", "provider: claud", 1), nil, ModeCheck,
			`models.claude-haiku.provider: "claud" is not among the configured providers`},
		{"missing key in a worker", twoProviders, map[string]string{"ANTHROPIC_API_KEY": key}, ModeWorker,
			"providers.azure-eu.key_env: environment variable AZURE_OPENAI_API_KEY is not set"},
		{"azure without api_version", strings.Replace(twoProviders, `api_version: "2024-10-21"`, "", 1), nil, ModeCheck,
			"providers.azure-eu.api_version: is required for kind azure"},
		{"azure without base_url", strings.Replace(twoProviders, "base_url: https://example-eu.openai.azure.com", "", 1), nil, ModeCheck,
			"providers.azure-eu.base_url: is required for kind azure"},
		{"bad kind", strings.Replace(twoProviders, "kind: anthropic", "kind: claude", 1), nil, ModeCheck,
			`providers.claude.kind: "claude": want openai, azure or anthropic`},
		{"no key_env", strings.Replace(twoProviders, "key_env: ANTHROPIC_API_KEY", "", 1), nil, ModeCheck,
			"providers.claude.key_env: is required"},
		{"a key variable twice", strings.Replace(twoProviders, "key_env: ANTHROPIC_API_KEY", "key_env: [A_KEY, B_KEY, A_KEY]", 1), nil, ModeCheck,
			"providers.claude.key_env: lists A_KEY twice"},
		{"two variables, one key", strings.Replace(twoProviders, "key_env: ANTHROPIC_API_KEY", "key_env: [A_KEY, B_KEY]", 1),
			map[string]string{"A_KEY": key, "B_KEY": key, "AZURE_OPENAI_API_KEY": "az-1"}, ModeWorker,
			"providers.claude.key_env: A_KEY and B_KEY hold the same key"},
		{"one of several keys unset in a worker", strings.Replace(twoProviders, "key_env: ANTHROPIC_API_KEY", "key_env: [A_KEY, B_KEY]", 1),
			map[string]string{"A_KEY": key, "AZURE_OPENAI_API_KEY": "az-1"}, ModeWorker,
			"providers.claude.key_env: environment variable B_KEY is not set"},
		{"too many keys", strings.Replace(twoProviders, "key_env: ANTHROPIC_API_KEY", "key_env: [K1, K2, K3, K4, K5, K6, K7, K8, K9, K10, K11, K12, K13, K14, K15, K16, K17]", 1), nil, ModeCheck,
			"providers.claude.key_env: lists 17 variables; at most 16 keys per provider"},
		{"twice", strings.Replace(twoProviders, "name: azure-eu", "name: claude", 1), nil, ModeCheck,
			`providers[1].name: provider "claude" is configured twice`},
		{"model without provider among several", strings.Replace(twoProviders, "provider: claude, ", "", 1), nil, ModeCheck,
			"models.claude-haiku.provider: is required: 2 providers are configured"},
		{"api_version on anthropic", strings.Replace(twoProviders, "kind: anthropic", "kind: anthropic\n    api_version: x", 1), nil, ModeCheck,
			"providers.claude.api_version: is only for kind azure"},
		{"credentials in base_url", strings.Replace(twoProviders, "https://example-eu", "https://u:"+key+"@example-eu", 1), nil, ModeCheck,
			"providers.azure-eu.base_url: is not an http(s) URL without credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := loadYAML(t, tt.doc, tt.env)
			err := c.Validate(tt.mode)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("want an error with %q, got %v", tt.want, err)
			}
			if strings.Contains(err.Error(), key[:10]) {
				t.Fatalf("the error shows a key: %v", err)
			}
		})
	}
}
