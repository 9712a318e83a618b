package gateway

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prq-dev/prq/llmcall"
)

// Every API's request takes one path: front (authenticate, what the key
// could pay for, read, scan), its API's parse and count, then proceed
// (the key's quota, its tokens per minute, admission) and forward (the
// call, requeued through admission on a provider 429), whose reply the
// API's exchange answers with, settling. The same key may use every API:
// one quota, one order, one settle.

// exchange is how one request of a client API is sent to a model's
// provider and answered.
type exchange interface {
	// build is the upstream call of q for model m: the provider's
	// operation and body (the output cap is q.cap per choice).
	build(m Model, q *request) (op string, body []byte, err error)
	// streams reports whether the reply streams (no overall timeout).
	streams() bool
	// answer answers the client with the provider's reply (any status)
	// and settles q; cancel ends the upstream call.
	answer(g *Gateway, w http.ResponseWriter, r *http.Request, q *request, m Model, resp *http.Response, cancel context.CancelFunc)
}

// front authenticates the request, bounds what reading its body costs by
// what its key could pay for (left), reads it and scans it with pol.
// False: answered.
func (g *Gateway) front(w http.ResponseWriter, r *http.Request, q *request, pol scanPolicy) (body []byte, left int64, ok bool) {
	if q.key, ok = g.authenticate(w, r, q); !ok {
		return nil, 0, false
	}
	if left, ok = g.quotaLeft(w, r, q); !ok {
		return nil, 0, false
	}
	if body, ok = g.readBody(w, r, q, left); !ok {
		return nil, 0, false
	}
	if _, ok = g.scan(w, q, body, pol, left); !ok {
		return nil, 0, false
	}
	return body, left, true
}

// model looks up the request's model (404 when unknown or not the key's)
// and sets q.model.
func (g *Gateway) model(w http.ResponseWriter, q *request, name string) (Model, bool) {
	m, known := g.cfg.Models[name]
	if !known || !q.key.Allows(name) {
		q.fail(w, http.StatusNotFound, "invalid_request_error", "model_not_found", fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", name))
		return Model{}, false
	}
	q.model = name
	return m, true
}

// outputCap checks a requested output cap: at least 1, at most the
// model's context (a cap near 2^63, times n, would wrap a reservation).
func (g *Gateway) outputCap(w http.ResponseWriter, q *request, m Model, param string, v int64) bool {
	switch {
	case v < 1:
		q.bad(w, &requestError{param: param, msg: param + " must be at least 1."})
		return false
	case v > m.ContextTokens:
		q.bad(w, &requestError{param: param, msg: fmt.Sprintf("%s is too large: %d. This model supports at most %d tokens (its context window).", param, v, m.ContextTokens)})
		return false
	}
	return true
}

// proceed takes q (its model, input and choices set) through the key's
// quota (want output per choice, capped to what is left), its tokens per
// minute, then admission and the call on its model, or on the model's
// fallbacks in turn (fallback.go), with ex. est is the provider's
// admission estimate of the request with output tokens on a model.
func (g *Gateway) proceed(w http.ResponseWriter, r *http.Request, q *request, want int64, est func(m Model, output int64) int64, ex exchange) {
	ctx := r.Context()
	wait, err := g.maxWait(r)
	if err != nil {
		q.fail(w, http.StatusBadRequest, "invalid_request_error", "", err.Error())
		return
	}
	q.n = max(q.n, 1)
	q.id = newID()
	q.ticket, q.maxWait = q.id, wait
	q.deadline = time.Now().Add(wait)
	// the quota: output capped to what is left, waiting while others
	// hold it, or a refusal with nothing sent
	if !g.reserveQuota(w, r, q, want) {
		return
	}
	q.est = est(g.cfg.Models[q.model], q.cap*q.n)
	// from here a failure gives the quota reservation back unless a call
	// was made (settled on its own path)
	called := false
	defer func() {
		if !called {
			g.settleQuota(context.WithoutCancel(ctx), q, llmcall.Settlement{})
		}
	}()
	if q.key.TPM > 0 && !g.takeTPM(w, r, q) {
		return
	}
	chain := g.chain(q, ex)
	for i, model := range chain {
		last := i == len(chain)-1
		if i > 0 {
			q.model, q.ticket = model, fmt.Sprintf("%s-f%d", q.id, i)
			q.est = est(g.cfg.Models[model], q.cap*q.n)
		}
		bound := time.Time{}
		if !last {
			if reason, paused := g.adm.Paused(ctx)[model]; paused {
				g.fellBack(ctx, q, chain[i+1], "paused", reason)
				continue
			}
			bound = time.Now().Add(g.cfg.FallbackWait)
		}
		switch g.admitUntil(w, r, q, bound) {
		case admitAnswered:
			called = true // admission gave the reservations back
			return
		case admitTooLong:
			g.fellBack(ctx, q, chain[i+1], "wait", g.cfg.FallbackWait.String())
			continue
		}
		called = true
		if !g.forward(w, r, q, ex, !last) {
			return
		}
		g.fellBack(ctx, q, chain[i+1], "provider", "")
	}
}
