package gateway

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prq-dev/prq/internal/bodybudget"
	"github.com/prq-dev/prq/ratelimit"
)

// The front of every request, before anything is reserved: what a key
// could ever pay for bounds the cost of reading, scanning and counting
// its body, so a body that cannot be paid for is refused for about the
// price of its headers.

// unlimited is what a key without a quota could pay for.
const unlimited = math.MaxInt64

// bodySlack is the bytes a body may hold beyond 2·maxTokenBytes per
// token the key could pay for: the JSON around the text.
const bodySlack = 64 << 10

// quotaLeft is the tokens the key's quotas could pay for once its calls
// in flight settle (unlimited without a quota); a dollar quota pays for
// what is left at the cheapest input price of the models the key may
// use, and the minimum output besides (the bound errs high, never low).
// A key whose quota cannot cover the smallest request (one input token
// and, but for embeddings, the minimum output; in dollars at the
// cheapest prices) is refused (403) before its body is read: a spent key
// costs one Redis read, no CPU. q.bound is the quota that bounds it.
func (g *Gateway) quotaLeft(w http.ResponseWriter, r *http.Request, q *request) (int64, bool) {
	k := q.key
	if !k.hasQuota() {
		return unlimited, true
	}
	ctx := r.Context()
	quota := g.quotas[k.QuotaPeriod]
	held, err := g.held.held(ctx, k.ID)
	if err != nil {
		held = amounts{} // Reserve checks again
	}
	// an embeddings request has no output to pay for
	output, minOut := q.api != apiEmbeddings, g.cfg.MinOutput
	what := fmt.Sprintf("an input token and a minimum output of %d", minOut)
	if !output {
		minOut, what = 0, "an input token"
	}
	left := int64(unlimited)
	if k.QuotaTokens > 0 {
		left, q.bound = k.QuotaTokens, quotaShort{left: k.QuotaTokens} // unread: Reserve checks again, and reports
		if u, err := quota.Used(ctx, tenantOf(k), "", k.QuotaTokens); err == nil {
			tl := k.QuotaTokens - u.Used
			if tl+held.tokens < 1+minOut {
				// the key's use and its calls in flight are two reads: a
				// call reserving between them looks like a spent quota.
				// Before refusing, read both again, in flight last
				if u2, err := quota.Used(ctx, tenantOf(k), "", k.QuotaTokens); err == nil {
					if h2, err := g.held.held(ctx, k.ID); err == nil {
						u, tl, held = u2, k.QuotaTokens-u2.Used, h2
					}
				}
			}
			if tl+held.tokens < 1+minOut {
				g.refuseQuota(w, q, quotaShort{left: tl, needs: "less than the smallest request (" + what + ")"}, u.Reset)
				return 0, false
			}
			left = tl + held.tokens
			q.bound = quotaShort{left: left}
		}
	}
	if k.QuotaDollars <= 0 {
		return left, true
	}
	in, smallest, ok := g.cheapest(q, minOut)
	if !ok {
		return left, true // no model it may use is priced: each request is refused by its model
	}
	limit := ratelimit.Nano(k.QuotaDollars)
	u, err := quota.UsedDollars(ctx, tenantOf(k), "", limit)
	if err != nil {
		return left, true // Reserve checks again, and reports
	}
	dl := limit - u.Used
	if dl+held.nano < smallest {
		g.refuseQuota(w, q, quotaShort{dollars: true, left: dl, needs: "less than the smallest request (" + what + " at the cheapest prices of the models it may use)"}, u.Reset)
		return 0, false
	}
	if in > 0 && (dl+held.nano)/in+minOut < left {
		left = (dl+held.nano)/in + minOut
		q.bound = quotaShort{dollars: true, left: dl + held.nano}
	}
	return left, true
}

// cheapest is, among the models q's key may use whose calls can be
// counted in dollars, the lowest price of an input token and the lowest
// cost of one input token and minOut output tokens, in nano-dollars.
// False: none can.
func (g *Gateway) cheapest(q *request, minOut int64) (in, smallest int64, ok bool) {
	for name := range g.cfg.Models {
		if !g.serves(q, name) {
			continue
		}
		p, _ := nanoPrices(g.cfg.Models[name], q.api != apiEmbeddings)
		if c := p.of(1, minOut).nano; !ok || c < smallest {
			smallest = c
		}
		if !ok || p.in < in {
			in = p.in
		}
		ok = true
	}
	return in, smallest, ok
}

// inputBudget is the most input q's key, with left tokens, could pay
// for: what is left less the minimum output, or all of it for an
// embeddings request (which has no output).
func (g *Gateway) inputBudget(q *request, left int64) int64 {
	if left == unlimited {
		return unlimited
	}
	if q.api == apiEmbeddings {
		return max(left, 0)
	}
	return max(left-g.cfg.MinOutput, 0)
}

// bodyLimit is the largest body a key with left tokens could pay for.
func (g *Gateway) bodyLimit(q *request, left int64) int64 {
	b := g.inputBudget(q, left)
	if b == unlimited || b > (g.cfg.MaxBody-bodySlack)/(2*maxTokenBytes) {
		return g.cfg.MaxBody
	}
	return b*2*maxTokenBytes + bodySlack
}

// readBody reads the body, at most bodyLimit(left) bytes, within
// BodyTimeout and the budget of body bytes in flight: a larger one (by
// its Content-Length, before it is read) is refused, 403 when the key's
// quota is what bounds it, else 413; one that does not fit the budget
// 429 with Retry-After; one that stalls past the timeout 408. A client
// that has gone gets its connection closed, no status. False: answered.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, q *request, left int64) ([]byte, bool) {
	limit := g.bodyLimit(q, left)
	// A deadline for this body alone; a server without deadline support
	// (httptest's recorder) keeps its own.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(g.cfg.BodyTimeout))
	body, release, err := g.bodies.Read(r.Body, r.ContentLength, limit)
	q.release = release
	var ne net.Error
	switch {
	case errors.Is(err, bodybudget.ErrTooLarge) && limit < g.cfg.MaxBody:
		size := "over " + fmt.Sprint(limit)
		if r.ContentLength > 0 {
			size = fmt.Sprint(r.ContentLength)
		}
		g.refuseQuota(w, q, q.bound.needing(fmt.Sprintf(
			"and a body of %s bytes is more than it could pay for (a token is at most %d bytes: at most %d bytes with the JSON around it)", size, maxTokenBytes, limit)), g.quotaReset(q.key))
		return nil, false
	case errors.Is(err, bodybudget.ErrTooLarge):
		q.fail(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large", fmt.Sprintf("The request body is larger than %d bytes.", g.cfg.MaxBody))
		return nil, false
	case errors.Is(err, bodybudget.ErrFull):
		retryHeaders(w.Header(), time.Second)
		q.fail(w, http.StatusTooManyRequests, "requests", "bodies_in_flight", fmt.Sprintf(
			"The gateway holds %d bytes of request bodies, its limit; retry shortly.", g.cfg.MaxBodyBytesInFlight))
		return nil, false
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, bodybudget.ErrLonger):
		// the client stopped sending (closed its side, or its chunked
		// body broke off): what came is not the request it meant. The
		// server has cancelled the request's context (its connection
		// read EOF), but a client that only closed its side still reads.
		q.fail(w, http.StatusBadRequest, "invalid_request_error", "", fmt.Sprintf(
			"The request body was cut short or overran (%v): it did not match its Content-Length or end with its last chunk.", err))
		return nil, false
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		w.Header().Set("Connection", "close")
		q.fail(w, http.StatusRequestTimeout, "invalid_request_error", "request_timeout", fmt.Sprintf(
			"The request body did not arrive within %s.", g.cfg.BodyTimeout))
		return nil, false
	case err != nil && r.Context().Err() != nil:
		// the client left: close the connection without a status (an
		// empty 200 would look like success)
		panic(http.ErrAbortHandler)
	case err != nil:
		q.fail(w, http.StatusBadRequest, "invalid_request_error", "", fmt.Sprintf("The request body could not be read (%v).", err))
		return nil, false
	}
	return body, true
}

// quotaReset is when the key's quota window ends.
func (g *Gateway) quotaReset(k Key) time.Time {
	_, end := k.QuotaPeriod.Window(time.Now())
	return end
}

// scan checks the body's shape and refuses one whose least count is
// more than the key could pay for (403) or its model's context (400).
func (g *Gateway) scan(w http.ResponseWriter, q *request, body []byte, pol scanPolicy, left int64) (scanned, bool) {
	sc, err := scanBody(body, scanLimits{depth: g.cfg.MaxDepth, items: g.cfg.MaxItems, values: g.cfg.MaxValues, scalar: maxScalar}, pol)
	var le *limitError
	var re *requestError
	switch {
	case errors.As(err, &le):
		g.metrics.refused(q.key.ID, "too_large")
		q.fail(w, http.StatusBadRequest, "invalid_request_error", "request_too_large", le.msg)
		return sc, false
	case errors.As(err, &re):
		q.bad(w, re)
		return sc, false
	case err != nil:
		q.bad(w, &requestError{msg: "We could not parse the JSON body of your request: " + err.Error() + "."})
		return sc, false
	}
	least := sc.leastTokens()
	if budget := g.inputBudget(q, left); least > budget {
		g.refuseQuota(w, q, q.bound.needing(fmt.Sprintf("and the request's input is at least %d tokens", least)), g.quotaReset(q.key))
		return sc, false
	}
	if m, ok := g.cfg.Models[sc.model]; ok && least > m.ContextTokens {
		g.contextExceeded(w, q, sc.model, m, least, "at least ")
		return sc, false
	}
	return sc, true
}

// maxScalar bounds the value of a top-level field that is not counted
// (model, user, service_tier...).
const maxScalar = 4 << 10

func (g *Gateway) contextExceeded(w http.ResponseWriter, q *request, model string, m Model, n int64, least string) {
	g.metrics.refused(q.key.ID, "too_large")
	q.fail(w, http.StatusBadRequest, "invalid_request_error", "context_length_exceeded", fmt.Sprintf(
		"This model's maximum context length is %d tokens. However, your messages resulted in %s%d tokens. Please reduce the length of the messages.", m.ContextTokens, least, n))
}

// countInput counts the request's input with count, stopping at what the
// key could pay for; past it the request is refused (403), past the
// model's context too (400).
func (g *Gateway) countInput(w http.ResponseWriter, q *request, m Model, left int64, count func(budget int64) (int64, error)) (int64, bool) {
	ib := g.inputBudget(q, left)
	budget := min(ib, m.ContextTokens)
	n, err := count(budget)
	switch {
	case err != nil:
		q.bad(w, &requestError{msg: err.Error()})
		return 0, false
	case n > budget && ib <= m.ContextTokens:
		g.refuseQuota(w, q, q.bound.needing(fmt.Sprintf("and the request's input is more than %d tokens", ib)), g.quotaReset(q.key))
		return 0, false
	case n > budget:
		g.contextExceeded(w, q, q.model, m, budget, "more than ")
		return 0, false
	}
	return n, true
}
