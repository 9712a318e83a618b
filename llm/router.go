package llm

import (
	"context"
	"fmt"
)

// Completer makes one call: a *Client (OpenAI, Azure) or an *Anthropic.
type Completer interface {
	Complete(ctx context.Context, r Request) (Response, error)
}

var (
	_ Completer = (*Client)(nil)
	_ Completer = (*Anthropic)(nil)
)

// Router sends each request to the client of its model's provider, and
// of the provider's keys to the one the request names (Request.Key).
type Router struct {
	byModel map[string][]Completer
}

// NewRouter returns a router; byModel maps each model name to the
// clients of its provider, one per API key, in the provider's key order
// (admission's key indices).
func NewRouter(byModel map[string][]Completer) *Router {
	m := make(map[string][]Completer, len(byModel))
	for k, v := range byModel {
		m[k] = append([]Completer(nil), v...)
	}
	return &Router{byModel: m}
}

// Complete calls the request's model's provider with the request's key.
// A model without one, or a key it does not have, is a permanent
// failure (configuration validation prevents both).
func (r *Router) Complete(ctx context.Context, req Request) (Response, error) {
	cs := r.byModel[req.Model]
	if len(cs) == 0 {
		return Response{}, &Error{Kind: ErrPermanent, Message: fmt.Sprintf("model %q has no provider", req.Model)}
	}
	if req.Key < 0 || req.Key >= len(cs) {
		return Response{}, &Error{Kind: ErrPermanent, Message: fmt.Sprintf("model %q has no API key %d (it has %d)", req.Model, req.Key, len(cs))}
	}
	return cs[req.Key].Complete(ctx, req)
}

// Batcher returns the batch client of a model's provider for one of its
// keys: false for a model without a provider, a key it does not have, or
// a provider without a batch API.
func (r *Router) Batcher(model string, key int) (Batcher, bool) {
	cs := r.byModel[model]
	if key < 0 || key >= len(cs) {
		return nil, false
	}
	b, ok := cs[key].(Batcher)
	return b, ok
}
