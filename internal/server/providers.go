package server

import (
	"fmt"
	"time"

	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/llm"
)

// buildLLM builds one client per configured provider and key, and
// routes each model to its provider's clients (in key order: admission's
// key indices). Without providers it is the implicit OpenAI provider
// (OPENAI_API_KEY, OPENAI_BASE_URL), as before.
func buildLLM(cfg *config.Config) (*llm.Router, error) {
	timeout := cfg.OpenAI.Timeout.D()
	clients := map[string][]llm.Completer{}
	for _, p := range cfg.ProviderList() {
		for _, key := range p.KeyValues() {
			c, err := ProviderClient(p, key, timeout)
			if err != nil {
				return nil, err
			}
			clients[p.Name] = append(clients[p.Name], c)
		}
	}
	byModel := map[string][]llm.Completer{}
	for _, m := range cfg.Models {
		p, ok := cfg.ProviderOf(m.Name)
		if !ok {
			return nil, &config.SettingError{Name: "models." + m.Name + ".provider", Problem: "names no configured provider"}
		}
		byModel[m.Name] = clients[p.Name]
	}
	return llm.NewRouter(byModel), nil
}

// ProviderClient is the client prq calls provider p with, for one of its
// keys: OpenAI's API, an Azure OpenAI resource (deployments,
// api-version, api-key) or Anthropic's Messages API.
func ProviderClient(p config.ProviderConfig, key string, timeout time.Duration) (llm.Completer, error) {
	switch p.Kind {
	case config.KindOpenAI:
		return llm.New(key, p.BaseURL, timeout, nil), nil
	case config.KindAzure:
		return llm.NewAzure(key, p.BaseURL, p.APIVersion, p.Deployment, timeout, nil), nil
	case config.KindAnthropic:
		return llm.NewAnthropic(key, p.BaseURL, timeout, nil), nil
	}
	return nil, &config.SettingError{Name: "providers." + p.Name + ".kind", Problem: fmt.Sprintf("%q: want openai, azure or anthropic", p.Kind)}
}
