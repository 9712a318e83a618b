package config

import (
	"fmt"
	"net/url"
	"regexp"

	"gopkg.in/yaml.v3"
)

// Provider kinds.
const (
	KindOpenAI    = "openai"    // OpenAI or any OpenAI-compatible chat completions API
	KindAzure     = "azure"     // Azure OpenAI: deployments, api-version, api-key header
	KindAnthropic = "anthropic" // Anthropic's Messages API
)

// ImplicitProvider is the name of the provider prq makes from
// OPENAI_API_KEY and OPENAI_BASE_URL when providers is empty.
const ImplicitProvider = "openai"

// ProviderConfig is one LLM provider: where it is, how it is spoken to,
// and which environment variables hold its keys (a key is never written
// in the file).
type ProviderConfig struct {
	// Name is what models[].provider refers to.
	Name string `yaml:"name"`
	// Kind is openai, azure or anthropic.
	Kind string `yaml:"kind"`
	// BaseURL is the API's address: OpenAI's and Anthropic's public APIs
	// when empty; required for azure (https://RESOURCE.openai.azure.com).
	BaseURL string `yaml:"base_url"`
	// KeyEnv names the environment variables holding the keys: one name
	// or a list. Required. Each key has its own bucket with each model's
	// limits (a model's limits are per key), and admission spreads the
	// jobs over the keys.
	KeyEnv EnvList `yaml:"key_env"`
	// APIVersion is Azure's api-version query parameter. Required for azure.
	APIVersion string `yaml:"api_version"`
	// Deployments maps model names to Azure deployment names (azure
	// only). A model not listed is its own deployment name.
	Deployments map[string]string `yaml:"deployments"`

	// Keys are the values of KeyEnv, read at Load; never printed.
	Keys []Secret `yaml:"-"`
}

// EnvList is one environment variable name or a list of them.
type EnvList []string

// UnmarshalYAML takes a scalar or a sequence.
func (l *EnvList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = EnvList{n.Value}
		return nil
	}
	var s []string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: key_env: want a variable name or a list of them", n.Line)
	}
	*l = s
	return nil
}

// Key returns the provider's key ("" when its variable is unset).
func (p ProviderConfig) Key() string {
	if len(p.Keys) == 0 {
		return ""
	}
	return string(p.Keys[0])
}

// KeyValues returns the provider's keys in order: the values of KeyEnv
// (one "" when none is read, as Key; a process that does not call the
// provider may run without them).
func (p ProviderConfig) KeyValues() []string {
	if len(p.Keys) == 0 {
		return []string{""}
	}
	out := make([]string, len(p.Keys))
	for i, k := range p.Keys {
		out[i] = string(k)
	}
	return out
}

// Deployment returns the Azure deployment that serves model.
func (p ProviderConfig) Deployment(model string) string {
	if d := p.Deployments[model]; d != "" {
		return d
	}
	return model
}

// ProviderList returns the configured providers, or the implicit OpenAI
// provider made from openai (OPENAI_API_KEY, OPENAI_BASE_URL) when none
// is configured.
func (c *Config) ProviderList() []ProviderConfig {
	if len(c.Providers) > 0 {
		return c.Providers
	}
	p := ProviderConfig{Name: ImplicitProvider, Kind: KindOpenAI, BaseURL: c.OpenAI.BaseURL, KeyEnv: EnvList{"OPENAI_API_KEY"}}
	if c.OpenAI.APIKey != "" {
		p.Keys = []Secret{c.OpenAI.APIKey}
	}
	return []ProviderConfig{p}
}

// ModelNames are the configured models' names, in configuration order.
func (c *Config) ModelNames() []string {
	names := make([]string, 0, len(c.Models))
	for _, m := range c.Models {
		names = append(names, m.Name)
	}
	return names
}

// ProviderOf returns the provider that serves the named model.
func (c *Config) ProviderOf(model string) (ProviderConfig, bool) {
	m, ok := c.Model(model)
	if !ok {
		return ProviderConfig{}, false
	}
	ps := c.ProviderList()
	if m.Provider == "" {
		if len(ps) == 1 {
			return ps[0], true
		}
		return ProviderConfig{}, false
	}
	for _, p := range ps {
		if p.Name == m.Provider {
			return p, true
		}
	}
	return ProviderConfig{}, false
}

// readKeys fills each provider's Keys from the environment.
func (c *Config) readKeys(getenv func(string) string) {
	for i := range c.Providers {
		p := &c.Providers[i]
		p.Keys = nil
		for _, name := range p.KeyEnv {
			p.Keys = append(p.Keys, Secret(getenv(name)))
		}
	}
}

// maxKeys bounds a provider's keys (admission reads every key's bucket
// at each decision).
const maxKeys = 16

var providerName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,39}$`)

// validateProviders checks providers and which provider each model
// names; needKeys: every key variable must be set (the processes that
// call providers). Problems never quote a key, only variable names.
func (c *Config) validateProviders(bad func(name, format string, a ...any), needKeys bool) {
	names := map[string]bool{}
	for i, p := range c.Providers {
		at := fmt.Sprintf("providers[%d]", i)
		if !providerName.MatchString(p.Name) {
			bad(at+".name", "%q: want lower-case letters, digits, - or _ (at most 40)", p.Name)
		} else if names[p.Name] {
			bad(at+".name", "provider %q is configured twice", p.Name)
		} else {
			at = "providers." + p.Name
		}
		names[p.Name] = true
		switch p.Kind {
		case KindOpenAI, KindAnthropic:
			if p.APIVersion != "" {
				bad(at+".api_version", "is only for kind azure")
			}
			if len(p.Deployments) > 0 {
				bad(at+".deployments", "is only for kind azure")
			}
		case KindAzure:
			if p.APIVersion == "" {
				bad(at+".api_version", "is required for kind azure (for example 2024-10-21)")
			}
			if p.BaseURL == "" {
				bad(at+".base_url", "is required for kind azure (https://RESOURCE.openai.azure.com)")
			}
		default:
			bad(at+".kind", "%q: want openai, azure or anthropic", p.Kind)
		}
		if p.BaseURL != "" {
			if u, err := url.Parse(p.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
				bad(at+".base_url", "is not an http(s) URL without credentials")
			}
		}
		if len(p.KeyEnv) == 0 {
			bad(at+".key_env", "is required: the environment variable that holds the key, or a list of them (for example ANTHROPIC_API_KEY)")
		}
		if len(p.KeyEnv) > maxKeys {
			bad(at+".key_env", "lists %d variables; at most %d keys per provider", len(p.KeyEnv), maxKeys)
		}
		envs := map[string]bool{}
		for k, env := range p.KeyEnv {
			switch {
			case env == "":
				bad(at+".key_env", "has an empty variable name")
			case envs[env]:
				bad(at+".key_env", "lists %s twice", env)
			case needKeys && (k >= len(p.Keys) || p.Keys[k] == ""):
				bad(at+".key_env", "environment variable %s is not set", env)
			}
			envs[env] = true
		}
		if needKeys {
			// two variables with one value would be one key counted twice:
			// twice its limit admitted, and 429s
			vals := map[Secret]string{}
			for k, v := range p.Keys {
				if prev, dup := vals[v]; dup && v != "" && k < len(p.KeyEnv) {
					bad(at+".key_env", "%s and %s hold the same key", prev, p.KeyEnv[k])
				}
				if k < len(p.KeyEnv) {
					vals[v] = p.KeyEnv[k]
				}
			}
		}
	}
	if len(c.Providers) > 0 && c.OpenAI.BaseURL != "" {
		bad("OPENAI_BASE_URL", "is for the implicit provider only; with providers set it in providers[].base_url")
	}
	for _, m := range c.Models {
		switch {
		case m.Provider == "" && len(c.Providers) > 1:
			bad("models."+m.Name+".provider", "is required: %d providers are configured", len(c.Providers))
		case m.Provider != "" && len(c.Providers) == 0 && m.Provider != ImplicitProvider:
			bad("models."+m.Name+".provider", "%q: no providers are configured (the implicit one is %q)", m.Provider, ImplicitProvider)
		case m.Provider != "" && len(c.Providers) > 0 && !names[m.Provider]:
			bad("models."+m.Name+".provider", "%q is not among the configured providers", m.Provider)
		}
	}
}
