package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Provider kinds: how a model's requests are forwarded.
const (
	// KindOpenAI: the request as it came, to {base}/chat/completions with
	// Authorization: Bearer.
	KindOpenAI = "openai"
	// KindAzure: the same body, to {base}/openai/deployments/{deployment}
	// /chat/completions?api-version={v} with an api-key header.
	KindAzure = "azure"
	// KindAnthropic: translated to Anthropic's Messages API ({base}
	// /v1/messages, x-api-key, anthropic-version) and the reply back to a
	// chat completion (anthropic.go).
	KindAnthropic = "anthropic"
)

// Provider operations: what a call asks of its provider.
const (
	opChat       = "chat"       // OpenAI's chat completions
	opEmbeddings = "embeddings" // OpenAI's embeddings
	opMessages   = "messages"   // Anthropic's Messages API
)

// AnthropicVersion is the anthropic-version header the gateway sends.
const AnthropicVersion = "2023-06-01"

// Provider is where a model's requests go. Models of one provider share
// one *Provider.
type Provider struct {
	// Kind is KindOpenAI (the default), KindAzure or KindAnthropic.
	Kind string
	// BaseURL is the API's address: OpenAI's with its version
	// (https://api.openai.com/v1); Azure's resource endpoint
	// (https://RESOURCE.openai.azure.com); Anthropic's root, without /v1
	// (https://api.anthropic.com). Required.
	BaseURL string
	// Keys are the provider's keys in the order of its models' buckets
	// (admission's key indices): a request is sent with the key admission
	// charged. One key may be "" (no credential sent: a local server).
	Keys []string
	// APIVersion is Azure's api-version. Required for KindAzure.
	APIVersion string
}

// check validates p and trims its base URL.
func (p *Provider) check() error {
	if p.Kind == "" {
		p.Kind = KindOpenAI
	}
	switch p.Kind {
	case KindOpenAI, KindAnthropic:
	case KindAzure:
		if p.APIVersion == "" {
			return fmt.Errorf("gateway: an Azure provider needs its api-version")
		}
	default:
		return fmt.Errorf("gateway: provider kind %q: want %s, %s or %s", p.Kind, KindOpenAI, KindAzure, KindAnthropic)
	}
	p.BaseURL = strings.TrimRight(p.BaseURL, "/")
	if u, err := url.Parse(p.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("gateway: upstream URL %q: want an http(s) URL with a host", p.BaseURL)
	}
	if len(p.Keys) == 0 {
		p.Keys = []string{""}
	}
	return nil
}

// newUpstream builds the call of op for a model (served by p as
// deployment, for Azure) with the body and API key: the provider's path
// and its way of sending the key.
func (p *Provider) newUpstream(ctx context.Context, deployment, op string, body []byte, apiKey string) (*http.Request, error) {
	path := "/chat/completions"
	if op == opEmbeddings {
		path = "/embeddings"
	}
	var u string
	switch p.Kind {
	case KindAzure:
		u = p.BaseURL + "/openai/deployments/" + url.PathEscape(deployment) + path + "?api-version=" + url.QueryEscape(p.APIVersion)
	case KindAnthropic:
		u = p.BaseURL + "/v1/messages"
	default:
		u = p.BaseURL + path
	}
	up, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	up.Header.Set("Content-Type", "application/json")
	switch {
	case apiKey == "":
	case p.Kind == KindAzure:
		up.Header.Set("api-key", apiKey)
	case p.Kind == KindAnthropic:
		up.Header.Set("x-api-key", apiKey)
	default:
		up.Header.Set("Authorization", "Bearer "+apiKey)
	}
	if p.Kind == KindAnthropic {
		up.Header.Set("anthropic-version", AnthropicVersion)
	}
	return up, nil
}
