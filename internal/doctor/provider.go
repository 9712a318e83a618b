package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/prq-dev/prq/ratelimit"
)

// CheckProvider checks that the provider accepts the key and lists each
// configured model (GET /models), that each model answers a 1-token
// request, and that the limits in its x-ratelimit-limit-* headers are not
// below the configured ones.
func CheckProvider(ctx context.Context, client *http.Client, p Provider) []Result {
	base := strings.TrimSuffix(p.BaseURL, "/")
	if base == "" {
		base = "https://api.openai.com/v1"
	}
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return []Result{{Name: "provider key", Detail: fmt.Sprintf("OPENAI_BASE_URL %q is not an http(s) URL", base), Fix: "set OPENAI_BASE_URL like https://api.openai.com/v1"}}
	}
	if p.APIKey == "" {
		return []Result{{Name: "provider key", Detail: "OPENAI_API_KEY is not set", Fix: "set OPENAI_API_KEY to a key of the provider at OPENAI_BASE_URL"}}
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	keyRes := Result{Name: "provider key"}
	status, body, err := getJSON(ctx, client, base+"/models", "Bearer "+p.APIKey, &list)
	switch {
	case err != nil:
		keyRes.Detail, keyRes.Fix = "GET /models: "+err.Error(), "check OPENAI_BASE_URL and that the provider is reachable from here"
		return []Result{keyRes}
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		keyRes.Detail = fmt.Sprintf("GET /models answered %d: the provider refused OPENAI_API_KEY", status)
		keyRes.Fix = "set OPENAI_API_KEY to a valid key of the provider at OPENAI_BASE_URL (a project key needs the model permissions prq uses)"
		return []Result{keyRes}
	case status != http.StatusOK:
		keyRes.Detail, keyRes.Fix = fmt.Sprintf("GET /models answered %d %s", status, body), "check OPENAI_BASE_URL (it ends in /v1 for OpenAI)"
		return []Result{keyRes}
	}
	listed := map[string]bool{}
	for _, m := range list.Data {
		listed[m.ID] = true
	}
	keyRes.OK, keyRes.Detail = true, fmt.Sprintf("key accepted; %d models listed", len(listed))
	out := []Result{keyRes}
	for _, m := range p.Models {
		model := Result{Name: "provider model " + m.Name}
		if !listed[m.Name] {
			model.Detail = fmt.Sprintf("model %q is unknown to the provider (GET /models does not list it for this key)", m.Name)
			model.Fix = "correct models[].name and jobs.*_model in PRQ_CONFIG to a model the provider lists, or give the key access to it"
			out = append(out, model)
			continue
		}
		status, h, body, err := ping(ctx, client, base, p.APIKey, m)
		switch {
		case err != nil:
			model.Detail, model.Fix = "1-token request: "+err.Error(), "check that the provider is reachable from here"
			out = append(out, model)
			continue
		case status == http.StatusTooManyRequests && strings.Contains(body, "insufficient_quota"):
			model.Detail, model.Fix = "1-token request answered 429 insufficient_quota", "the account is out of credit: add billing or raise its budget at the provider"
			out = append(out, model)
			continue
		case status != http.StatusOK && status != http.StatusTooManyRequests:
			model.Detail = fmt.Sprintf("1-token request answered %d %s", status, body)
			model.Fix = "give the key access to the model, or set models[].reasoning for models that take max_completion_tokens"
			out = append(out, model)
			continue
		}
		model.OK, model.Detail = true, "listed and callable"
		if status == http.StatusTooManyRequests {
			model.Detail = "listed; the 1-token request was rate limited (429), so the key is at its limit now"
		}
		out = append(out, model, limitsResult(m, ratelimit.ParseHeaders(h)))
	}
	return out
}

// ping sends a 1-token chat completion.
func ping(ctx context.Context, client *http.Client, base, key string, m Model) (int, http.Header, string, error) {
	req := map[string]any{"model": m.Name, "messages": []map[string]string{{"role": "user", "content": "ping"}}}
	if m.Reasoning {
		req["max_completion_tokens"] = 1
	} else {
		req["max_tokens"] = 1
	}
	b, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/chat/completions", bytes.NewReader(b))
	if err != nil {
		return 0, nil, "", err
	}
	hr.Header.Set("Authorization", "Bearer "+key)
	hr.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(hr)
	if err != nil {
		return 0, nil, "", scrubURLError(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, resp.Header, oneLine(body), nil
}

// limitsResult compares the provider's per-minute limits with prq's.
func limitsResult(m Model, ps ratelimit.ProviderState) Result {
	r := Result{Name: "provider limits " + m.Name}
	c := limitsPerMinute(m)
	if ps.LimitRequests < 0 && ps.LimitTokens < 0 && ps.LimitInputTokens < 0 && ps.LimitOutputTokens < 0 {
		r.OK, r.Detail = true, "not verified: the provider sends no rate-limit headers; keep the configured limits at or below the account's"
		return r
	}
	var over []string
	var fixes []string
	if ps.LimitRequests >= 0 && c.requests > ps.LimitRequests {
		over = append(over, fmt.Sprintf("requests_per_minute %d > provider's %d", c.requests, ps.LimitRequests))
		fixes = append(fixes, fmt.Sprintf("requests_per_minute: %d", ps.LimitRequests))
	}
	if ps.LimitTokens >= 0 && c.tokens > ps.LimitTokens && !ps.TokensMostRestrictive {
		over = append(over, fmt.Sprintf("tokens_per_minute %d > provider's %d", c.tokens, ps.LimitTokens))
		fixes = append(fixes, fmt.Sprintf("tokens_per_minute: %d", ps.LimitTokens))
	}
	io, iofix := anthropicOver(c, ps)
	over, fixes = append(over, io...), append(fixes, iofix...)
	if len(over) > 0 {
		r.Detail = "configured above the provider's limits (" + strings.Join(over, "; ") + "): expect 429s"
		r.Fix = "in PRQ_CONFIG set models[" + m.Name + "] " + strings.Join(fixes, ", ") + " (or raise the account's tier)"
		return r
	}
	r.OK, r.Detail = true, fmt.Sprintf("provider allows %s requests/min and %s tokens/min; configured %d and %d",
		unknown(ps.LimitRequests), unknown(ps.LimitTokens), c.requests, c.tokens)
	if ps.LimitInputTokens >= 0 || ps.LimitOutputTokens >= 0 {
		r.Detail = fmt.Sprintf("provider allows %s requests/min, %s input and %s output tokens/min; configured %d, %d and %d",
			unknown(ps.LimitRequests), unknown(ps.LimitInputTokens), unknown(ps.LimitOutputTokens), c.requests, c.input, c.output)
	}
	return r
}

func unknown(n int64) string {
	if n < 0 {
		return "?"
	}
	return fmt.Sprint(n)
}
