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

// Router sends each request to the client of its model's provider.
type Router struct {
	byModel map[string]Completer
}

// NewRouter returns a router; byModel maps each model name to the
// client of its provider.
func NewRouter(byModel map[string]Completer) *Router {
	m := make(map[string]Completer, len(byModel))
	for k, v := range byModel {
		m[k] = v
	}
	return &Router{byModel: m}
}

// Complete calls the request's model's provider. A model without one is
// a permanent failure (configuration validation prevents it).
func (r *Router) Complete(ctx context.Context, req Request) (Response, error) {
	c, ok := r.byModel[req.Model]
	if !ok {
		return Response{}, &Error{Kind: ErrPermanent, Message: fmt.Sprintf("model %q has no provider", req.Model)}
	}
	return c.Complete(ctx, req)
}
