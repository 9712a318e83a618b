package gateway

// POST /v1/chat/completions: OpenAI's chat completions, forwarded as they
// came to OpenAI-kind and Azure providers (the output cap set, the usage
// chunk asked for) and translated to Anthropic's Messages API for
// Anthropic models (anthropic.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/prq-dev/prq/ratelimit"
)

func (g *Gateway) chat(w http.ResponseWriter, r *http.Request, q *request) {
	body, left, ok := g.front(w, r, q, chatPolicy)
	if !ok {
		return
	}
	req, err := parseRequest(body)
	if err != nil {
		q.bad(w, err)
		return
	}
	m, ok := g.model(w, q, req.Model)
	if !ok {
		return
	}
	if len(req.messages) == 0 {
		q.fail(w, http.StatusBadRequest, "invalid_request_error", "", "'messages' must contain at least one message.")
		return
	}
	if req.MaxTokens != nil && req.MaxCompletionTokens != nil {
		q.fail(w, http.StatusBadRequest, "invalid_request_error", "", "max_tokens and max_completion_tokens cannot both be set.")
		return
	}
	ex := &chatExchange{req: req, opts: map[string]json.RawMessage{}}
	if len(req.StreamOptions) > 0 && string(req.StreamOptions) != "null" {
		if !req.Stream {
			q.fail(w, http.StatusBadRequest, "invalid_request_error", "", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
			return
		}
		if err := json.Unmarshal(req.StreamOptions, &ex.opts); err != nil {
			q.fail(w, http.StatusBadRequest, "invalid_request_error", "", "Invalid stream_options: "+err.Error())
			return
		}
		if v, ok := ex.opts["include_usage"]; ok && string(v) == "true" {
			ex.clientUsage = true
		}
	}
	// bounded here, the products below (cap × n, input + cap × n) stay
	// far from overflowing
	want := m.MaxOutput
	for _, f := range []struct {
		name string
		v    *int64
	}{{"max_tokens", req.MaxTokens}, {"max_completion_tokens", req.MaxCompletionTokens}} {
		if f.v == nil {
			continue
		}
		if !g.outputCap(w, q, m, f.name, *f.v) {
			return
		}
		want = *f.v
	}
	q.n = 1
	if req.N != nil {
		if *req.N < 1 || *req.N > maxChoices {
			q.bad(w, &requestError{param: "n", msg: fmt.Sprintf("n must be between 1 and %d.", maxChoices)})
			return
		}
		q.n = *req.N
	}
	if m.Provider.Kind == KindAnthropic {
		if q.anth, err = toAnthropic(req); err != nil {
			q.bad(w, err)
			return
		}
	}
	texts, err := req.texts()
	if err != nil {
		q.bad(w, err)
		return
	}
	if q.input, ok = g.countInput(w, q, m, left, func(budget int64) (int64, error) { return g.counters[req.Model].messages(texts, budget) }); !ok {
		return
	}
	g.proceed(w, r, q, want, func(m Model, output int64) int64 {
		est := ratelimit.EstimateOpenAI(texts, output)
		if m.Provider.Kind == KindAnthropic && q.anth != nil && q.anth.tool != "" {
			// a forced tool: Anthropic adds its tool-use system prompt
			// to the input it counts
			est += ratelimit.AnthropicToolUseTokens
		}
		return est
	}, ex)
}

// chatExchange is a chat completion's call.
type chatExchange struct {
	req         chatRequest
	opts        map[string]json.RawMessage // stream_options as the client sent them
	clientUsage bool                       // the client asked for the usage chunk itself
}

func (c *chatExchange) streams() bool { return c.req.Stream }

func (c *chatExchange) build(m Model, q *request) (string, []byte, error) {
	if m.Provider.Kind == KindAnthropic {
		if q.anth == nil || q.anth.Model != q.model { // a fallback's
			anth, err := toAnthropic(c.req)
			if err != nil {
				return "", nil, err
			}
			anth.Model, q.anth = q.model, anth
		}
		q.anth.MaxTokens, q.anth.Stream = q.cap, c.req.Stream
		body, err := json.Marshal(q.anth)
		return opMessages, body, err
	}
	raw := c.req.raw
	raw["model"], _ = json.Marshal(q.model) // a fallback's
	capJSON, _ := json.Marshal(q.cap)
	if m.Reasoning || c.req.MaxCompletionTokens != nil {
		raw["max_completion_tokens"] = capJSON
		delete(raw, "max_tokens")
	} else {
		raw["max_tokens"] = capJSON
		delete(raw, "max_completion_tokens")
	}
	if c.req.Stream {
		opts := map[string]json.RawMessage{}
		for k, v := range c.opts {
			opts[k] = v
		}
		opts["include_usage"] = json.RawMessage("true")
		raw["stream_options"], _ = json.Marshal(opts)
	}
	body, err := json.Marshal(raw)
	return opChat, body, err
}

func (c *chatExchange) answer(g *Gateway, w http.ResponseWriter, r *http.Request, q *request, m Model, resp *http.Response, cancel context.CancelFunc) {
	if m.Provider.Kind == KindAnthropic {
		g.forwardAnthropic(w, r, q, resp, c.req.Stream, c.clientUsage, cancel)
		return
	}
	copyHeaders(w, resp)
	if resp.StatusCode != http.StatusOK || !c.req.Stream {
		g.forwardWhole(w, r, q, resp)
		return
	}
	g.forwardStream(w, r, q, resp, c.clientUsage, cancel)
}
