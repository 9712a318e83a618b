package doctor

import (
	"context"
	"errors"
	"fmt"

	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
)

// Call is a provider doctor reaches through prq's own client for it
// (Azure OpenAI, Anthropic): the requests, paths and headers prq's jobs
// send. Each model gets a short call.
type Call struct {
	// Provider names the provider (providers[].name) and Kind its kind,
	// for the results' names and fixes.
	Provider, Kind string
	// Key labels the key in results ("" for a provider's only key; its
	// short hash and position otherwise). Never the key itself.
	Key string
	// APIKey is the key the client sends: only to redact it from the
	// results, should a provider echo it.
	APIKey string
	Client llm.Completer
	Models []Model
}

// CheckCall makes one short call per model through c's client: the key
// and the model (an Azure deployment, an Anthropic model id) are
// accepted, and the provider's limit headers are compared with prq's.
func CheckCall(ctx context.Context, c Call) []Result {
	var out []Result
	suffix := ""
	if c.Key != "" {
		suffix = " (" + c.Key + ")"
	}
	for _, m := range c.Models {
		r := Result{Name: "provider " + c.Provider + " model " + m.Name + suffix}
		resp, err := c.Client.Complete(ctx, llm.Request{Model: m.Name, User: "Reply with OK.", MaxOutput: 16, Reasoning: m.Reasoning})
		var le *llm.Error
		answered := err == nil
		switch {
		case err == nil:
			r.OK, r.Detail = true, "callable"
		case errors.As(err, &le) && le.Status == 0 && le.Header != nil:
			// the provider answered 200 with a reply prq could not use at
			// 16 tokens (a reasoning model's cap used up): callable
			r.OK, r.Detail, resp.Header, answered = true, "callable (the short reply was empty: "+le.Message+")", le.Header, true
		case errors.Is(err, llm.ErrRateLimited):
			r.OK, r.Detail = true, "callable; the call was rate limited (429), so the key is at its limit now"
			if le != nil || errors.As(err, &le) {
				resp.Header, answered = le.Header, le.Header != nil
			}
		case errors.Is(err, llm.ErrAccount):
			r.Detail = "the provider refused the key or the account: " + err.Error()
			r.Fix = fmt.Sprintf("set a valid key of the %s provider %q (providers[].key_env), with credit and access to %s", c.Kind, c.Provider, m.Name)
		case errors.Is(err, llm.ErrPermanent), errors.Is(err, llm.ErrContextLength):
			r.Detail = "the provider refused the call: " + err.Error()
			r.Fix = callFix(c.Kind, m.Name)
		default:
			r.Detail = "the call failed: " + err.Error()
			r.Fix = fmt.Sprintf("check providers[%s].base_url and that the provider is reachable from here", c.Provider)
		}
		out = append(out, r)
		if answered && resp.Header != nil {
			l := limitsResult(m, ratelimit.ParseHeaders(resp.Header))
			l.Name = "provider " + c.Provider + " limits " + m.Name + suffix
			out = append(out, l)
		}
	}
	return out
}

// callFix says what to correct when a provider refuses a model's call.
func callFix(kind, model string) string {
	switch kind {
	case "azure":
		return fmt.Sprintf("check that the resource has a deployment for %s (providers[].deployments maps model names to deployment names) and that providers[].api_version is one it serves", model)
	case "anthropic":
		return fmt.Sprintf("correct models[].name to a model id the Anthropic account can use (not %q), or give the key access to it", model)
	}
	return "correct models[].name to a model the provider serves"
}

// anthropicOver is limitsResult's comparison of input and output limits
// (Anthropic's), as lines for its detail and fix.
func anthropicOver(m perMinute, ps ratelimit.ProviderState) (over, fixes []string) {
	if ps.LimitInputTokens >= 0 && m.input > 0 && m.input > ps.LimitInputTokens {
		over = append(over, fmt.Sprintf("input_tokens_per_minute %d > provider's %d", m.input, ps.LimitInputTokens))
		fixes = append(fixes, fmt.Sprintf("input_tokens_per_minute: %d", ps.LimitInputTokens))
	}
	if ps.LimitOutputTokens >= 0 && m.output > 0 && m.output > ps.LimitOutputTokens {
		over = append(over, fmt.Sprintf("output_tokens_per_minute %d > provider's %d", m.output, ps.LimitOutputTokens))
		fixes = append(fixes, fmt.Sprintf("output_tokens_per_minute: %d", ps.LimitOutputTokens))
	}
	return over, fixes
}
