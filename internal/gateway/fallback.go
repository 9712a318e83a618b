package gateway

import (
	"context"
)

// A model's fallbacks (Model.Fallbacks) serve a request it cannot: the
// request moves to the next model of the list when its model is paused
// (whole, or on every key: a bad key, exhausted billing), when it was
// not admitted within Config.FallbackWait (the wait for its bucket is
// past that bound), or when the provider failed the call (a 5xx or an
// overload, a call that could not be sent, 429s past the gateway's
// requeues). It moves through admission, in the fallback's own bucket
// and order, never around it; its quota reservation (the key's, one for
// all the models) stays, settled once by the call that answers. The
// last model of the list waits until the request's deadline. A timeout
// (the call may have run) does not move: it keeps its reservation and
// is answered 504. Each move is counted
// (prq_gateway_fallbacks_total) and logged.

// chain is the models q may be served by: its own, then those of its
// fallbacks the key may use (under a dollar quota: those with prices)
// and ex can build a call for.
func (g *Gateway) chain(q *request, ex exchange) []string {
	out := []string{q.model}
	for _, f := range g.cfg.Models[q.model].Fallbacks {
		if !g.serves(q, f) {
			continue
		}
		m := g.cfg.Models[f]
		saved := q.model
		q.model = f
		_, _, err := ex.build(m, q) // what cannot be translated for it is skipped
		q.model = saved
		if err == nil {
			out = append(out, f)
		}
	}
	return out
}

// fellBack counts and logs a move from q's model to the next one.
func (g *Gateway) fellBack(ctx context.Context, q *request, to, reason, detail string) {
	g.metrics.fellBack(q.model, to, reason)
	g.log.InfoContext(ctx, "gateway: moving to a fallback model", "key", q.key.ID, "from", q.model, "to", to, "reason", reason, "detail", detail)
}
