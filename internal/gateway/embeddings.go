package gateway

// POST /v1/embeddings: OpenAI's embeddings, counted exactly (a text's
// tokens, a token array's length; no framing, no output) and charged to
// the key's quota, its tokens per minute and the model's bucket as
// input only, forwarded as they came to OpenAI-kind and Azure providers
// (Anthropic serves no embeddings).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// embeddingsPolicy scans an embeddings body: input is counted (its token
// arrays a token a number), the rest is not.
var embeddingsPolicy = scanPolicy{
	uncounted: map[string]bool{"model": true, "encoding_format": true, "dimensions": true, "user": true},
	ids:       map[string]bool{"input": true},
}

// OpenAI's embeddings limits.
const (
	maxEmbeddingInputs = 2048
	maxEmbeddingTokens = 300000
)

type embeddingsRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat *string         `json:"encoding_format"`
}

// embeddingInputs reads input: a string, strings, token ids, or arrays
// of token ids.
func embeddingInputs(raw json.RawMessage) (texts []string, ids int64, err error) {
	bad := &requestError{param: "input", msg: "'input' must be a non-empty string, an array of non-empty strings, an array of token ids or an array of token-id arrays."}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, 0, &requestError{param: "input", msg: "Missing required parameter: 'input'."}
	}
	// decided by the shape: a failed decode may leave a partial result
	var many []string
	var arrays [][]int64
	switch {
	case raw[0] == '"':
		var s string
		err = json.Unmarshal(raw, &s)
		many = []string{s}
	case raw[0] != '[':
		err = bad
	default:
		var first []json.RawMessage
		if err = json.Unmarshal(raw, &first); err == nil && len(first) > 0 {
			switch c := bytes.TrimSpace(first[0]); {
			case len(c) > 0 && c[0] == '"':
				err = json.Unmarshal(raw, &many)
			case len(c) > 0 && c[0] == '[':
				err = json.Unmarshal(raw, &arrays)
			default:
				var one []int64
				err = json.Unmarshal(raw, &one)
				arrays = [][]int64{one}
			}
		}
	}
	if err != nil {
		return nil, 0, bad
	}
	if len(many)+len(arrays) == 0 || len(many)+len(arrays) > maxEmbeddingInputs {
		return nil, 0, &requestError{param: "input", msg: fmt.Sprintf("'input' must hold 1 to %d inputs.", maxEmbeddingInputs)}
	}
	for _, t := range many {
		if t == "" {
			return nil, 0, bad
		}
	}
	for _, a := range arrays {
		if len(a) == 0 {
			return nil, 0, bad
		}
		for _, id := range a {
			if id < 0 {
				return nil, 0, bad
			}
		}
		ids += int64(len(a))
	}
	return many, ids, nil
}

func (g *Gateway) embeddings(w http.ResponseWriter, r *http.Request, q *request) {
	body, left, ok := g.front(w, r, q, embeddingsPolicy)
	if !ok {
		return
	}
	var req embeddingsRequest
	if err := json.Unmarshal(body, &req); err != nil {
		q.bad(w, &requestError{msg: "We could not parse the JSON body of your request: " + err.Error()})
		return
	}
	m, ok := g.model(w, q, req.Model)
	if !ok {
		return
	}
	if m.Provider.Kind == KindAnthropic {
		q.bad(w, &requestError{param: "model", msg: fmt.Sprintf("The model `%s` is served by Anthropic, which has no embeddings API.", req.Model)})
		return
	}
	if f := req.EncodingFormat; f != nil && *f != "float" && *f != "base64" {
		q.bad(w, &requestError{param: "encoding_format", msg: fmt.Sprintf("'%s' is not one of ['float', 'base64'] - 'encoding_format'", *f)})
		return
	}
	texts, ids, err := embeddingInputs(req.Input)
	if err != nil {
		q.bad(w, err)
		return
	}
	count := func(budget int64) (int64, error) {
		n := ids
		for _, t := range texts {
			if n > budget {
				break
			}
			k, err := g.counters[req.Model].text(t, budget-n)
			if err != nil {
				return 0, err
			}
			n += k
		}
		return n, nil
	}
	if q.input, ok = g.countInput(w, q, m, left, count); !ok {
		return
	}
	if q.input > maxEmbeddingTokens {
		q.bad(w, &requestError{param: "input", msg: fmt.Sprintf("Requested %d tokens, max %d tokens per request.", q.input, maxEmbeddingTokens)})
		return
	}
	// no output: the estimate is the input, which is exact
	g.proceed(w, r, q, 0, func(Model, int64) int64 { return q.input }, &embeddingsExchange{body: body, model: req.Model})
}

// embeddingsExchange forwards an embeddings request as it came.
type embeddingsExchange struct {
	body  []byte
	model string // the one the body names
}

func (e *embeddingsExchange) streams() bool { return false }

func (e *embeddingsExchange) build(m Model, q *request) (string, []byte, error) {
	if m.Provider.Kind == KindAnthropic {
		return "", nil, &requestError{param: "model", msg: "Anthropic has no embeddings API."}
	}
	if q.model == e.model {
		return opEmbeddings, e.body, nil
	}
	// a fallback's: the same request for its model
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(e.body, &raw); err != nil {
		return "", nil, err
	}
	raw["model"], _ = json.Marshal(q.model)
	body, err := json.Marshal(raw)
	return opEmbeddings, body, err
}

func (e *embeddingsExchange) answer(g *Gateway, w http.ResponseWriter, r *http.Request, q *request, _ Model, resp *http.Response, _ context.CancelFunc) {
	copyHeaders(w, resp)
	g.forwardWhole(w, r, q, resp)
}
