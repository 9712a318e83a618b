package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
)

// A key may have a quota of tokens, of dollars, or both, per its
// period; a call must fit both. They are reserved by llmcall's one
// reservation (llmcall.ReserveQuota, the workers' too) in one turn of the
// key's ledger (held.go), and settled by its one rule. A request whose
// model has fallbacks is reserved once for all of them, at the dearest
// of their prices.

// quotaPoll bounds how long a waiter misses a settle in another process.
const quotaPoll = 100 * time.Millisecond

// amounts are what a request needs, reserves or holds of its key's
// quotas, or what they have left: tokens and nano-dollars.
type amounts struct{ tokens, nano int64 }

// describe says a in the units of k's quotas.
func (a amounts) describe(k Key) string {
	var parts []string
	if k.QuotaTokens > 0 {
		parts = append(parts, fmt.Sprintf("%d tokens", a.tokens))
	}
	if k.QuotaDollars > 0 {
		parts = append(parts, dollarsText(a.nano))
	}
	return strings.Join(parts, ", ")
}

// dollarsText is nano-dollars as dollars ("$0.00082").
func dollarsText(nano int64) string {
	return "$" + strconv.FormatFloat(float64(nano)/ratelimit.NanoDollars, 'f', -1, 64)
}

// dollarPrice is what a token costs under a dollar quota, in
// nano-dollars: an input token, an output token.
type dollarPrice struct{ in, out int64 }

// of is what input and output tokens come to in each quota's unit.
func (p dollarPrice) of(input, output int64) amounts {
	return amounts{tokens: input + output, nano: input*p.in + output*p.out}
}

// nanoPrices are m's prices under a dollar quota: the input at its
// dearest (a cache write may cost more than the input), the output. ok
// reports that m's calls can be counted in dollars: an output price for
// a call with output, an input price for one without (embeddings).
func nanoPrices(m Model, output bool) (p dollarPrice, ok bool) {
	if !m.Prices.Valid() {
		return dollarPrice{}, false
	}
	p.in, p.out = m.QuotaPrices(false)
	if output {
		return p, p.out > 0
	}
	return p, p.in > 0
}

// serves reports whether model may serve q for its key: the key may use
// it and, under a dollar quota, its calls can be counted in dollars.
func (g *Gateway) serves(q *request, model string) bool {
	m, ok := g.cfg.Models[model]
	if !ok || !q.key.Allows(model) {
		return false
	}
	if q.key.QuotaDollars > 0 {
		_, ok = nanoPrices(m, q.api != apiEmbeddings)
	}
	return ok
}

// requestPrice is what a token of q costs under its key's dollar quota:
// the dearest of the prices of the models that may serve it (its own
// and its fallbacks'), since its reservation is one for all of them.
// False: its own model's calls cannot be counted in dollars.
func (g *Gateway) requestPrice(q *request) (dollarPrice, bool) {
	output := q.api != apiEmbeddings
	p, ok := nanoPrices(g.cfg.Models[q.model], output)
	if !ok {
		return dollarPrice{}, false
	}
	for _, f := range g.cfg.Models[q.model].Fallbacks {
		if g.serves(q, f) {
			fp, _ := nanoPrices(g.cfg.Models[f], output)
			p = dollarPrice{in: max(p.in, fp.in), out: max(p.out, fp.out)}
		}
	}
	return p, true
}

// unpriced answers 403: q's key has a dollar quota and q's model no
// prices to count its calls in dollars, so the quota cannot be enforced
// on it. Nothing is reserved or sent.
func (g *Gateway) unpriced(w http.ResponseWriter, q *request) {
	g.metrics.refused(q.key.ID, "unpriced")
	q.fail(w, http.StatusForbidden, "invalid_request_error", "model_not_priced", fmt.Sprintf(
		"Key %s has a dollar quota, and the model `%s` has no prices (models[].prices) to count its calls in dollars: the key may not use it.", q.key.ID, q.model))
}

// reserveQuota reserves the key's quotas for q: input plus want output
// per choice, capped to what is left (q.cap), waiting while others hold
// what it needs (held.go). False: answered, nothing reserved.
func (g *Gateway) reserveQuota(w http.ResponseWriter, r *http.Request, q *request, want int64) bool {
	k := q.key
	q.cap = want
	if !k.hasQuota() {
		return true
	}
	var price dollarPrice // zero without a dollar quota
	if k.QuotaDollars > 0 {
		var ok bool
		if price, ok = g.requestPrice(q); !ok {
			g.unpriced(w, q)
			return false
		}
	}
	ctx := r.Context()
	bg := context.WithoutCancel(ctx)
	// a token per choice at least; for a request without output
	// (embeddings) only its input, as Reserve asks
	minOut, least := max(g.cfg.MinOutput, q.n), int64(1)
	if want == 0 {
		minOut, least = 0, 0
	}
	needed, most := price.of(q.input, minOut), price.of(q.input, want*q.n)
	wctx, cancel := context.WithDeadline(ctx, q.deadline)
	defer cancel()
	leave := func() {
		if err := g.held.unhold(bg, k.ID, q.id, true); err != nil {
			g.log.WarnContext(ctx, "gateway: leaving the quota's waiters failed; they drop the request at its deadline", "key", k.ID, "err", err)
		}
	}
	start := time.Now()
	for {
		wake := g.held.wait(k.ID)
		st, err := g.held.turn(wctx, k.ID, q.id, q.deadline, most)
		if err == nil && st.turn {
			var ok bool
			var left amounts
			ok, left, err = g.reserve(wctx, q, want*q.n, least, price)
			if err == nil && ok {
				q.reserved = time.Now()
				if err := g.held.granted(bg, k.ID, q.id, q.holds()); err != nil {
					g.log.WarnContext(ctx, "gateway: recording a held reservation failed; the key's waiters count it when it expires", "key", k.ID, "err", err)
				}
				g.metrics.quotaWaited(k.ID, time.Since(start))
				return true
			}
			if err == nil {
				if uerr := g.held.unhold(bg, k.ID, q.id, false); uerr != nil {
					g.log.WarnContext(ctx, "gateway: dropping a refused hold failed", "key", k.ID, "err", uerr)
				}
				if s, spent := spentQuota(k, left, st.held, needed, q.input, minOut); spent {
					// even with nothing held it cannot cover the request
					leave()
					g.refuseQuota(w, q, s, g.quotaReset(k))
					g.rateHeaders(bg, w.Header(), q)
					return false
				}
			}
		}
		if err != nil && wctx.Err() == nil {
			leave()
			g.log.ErrorContext(ctx, "gateway: quota reserve failed", "key", k.ID, "err", err)
			q.fail(w, http.StatusServiceUnavailable, "server_error", "", "The gateway could not reserve the key's quota; try again.")
			return false
		}
		// held by others: wait for one of them to settle
		t := time.NewTimer(quotaPoll)
		select {
		case <-wake:
		case <-t.C:
		case <-wctx.Done():
		}
		t.Stop()
		if wctx.Err() == nil {
			continue
		}
		leave()
		if ctx.Err() != nil {
			return false // the client left
		}
		g.metrics.refused(k.ID, "quota_held")
		retry := g.held.retryAfter(st)
		retryHeaders(w.Header(), retry)
		g.quotaNow(bg, w.Header(), k)
		q.fail(w, http.StatusTooManyRequests, "requests", "rate_limit_exceeded", fmt.Sprintf(
			"Key %s's quota is held by its requests in flight (%s) and did not free %s within %s. Please try again in %s.",
			k.ID, st.held.describe(k), needed.describe(k), q.maxWait, retry.Round(time.Second)))
		return false
	}
}

// reserve reserves q's input and output tokens (all its choices) in
// each of its key's quotas by llmcall's one reservation, the output
// capped to what the tighter one leaves, and sets q.hold and q.cap (per
// choice). When a quota cannot pay for the input and least output per
// choice, nothing stays reserved (false) and left is what each quota has
// left.
func (g *Gateway) reserve(ctx context.Context, q *request, output, least int64, price dollarPrice) (bool, amounts, error) {
	k := q.key
	h, err := llmcall.ReserveQuota(ctx, g.quotas[k.QuotaPeriod], llmcall.QuotaAsk{Tenant: tenantOf(k), ID: q.id,
		Tokens: k.QuotaTokens, Nano: ratelimit.Nano(k.QuotaDollars), Input: q.input, Output: output, Least: least * q.n, InPrice: price.in, OutPrice: price.out})
	var short *llmcall.QuotaShort
	if errors.As(err, &short) {
		if err != error(short) {
			g.log.WarnContext(ctx, "gateway: giving back a quota reservation failed", "key", k.ID, "err", err)
		}
		return false, amounts{tokens: short.LeftTokens, nano: short.LeftNano}, nil
	}
	if err != nil {
		return false, amounts{}, err
	}
	q.hold, q.cap = h, h.Cap/q.n
	return true, amounts{}, nil
}

// holds is what q's reservations hold.
func (q *request) holds() amounts {
	tokens, nano := q.hold.Held()
	return amounts{tokens: tokens, nano: nano}
}

// quotaShort is a quota of a key's that cannot pay for a request.
type quotaShort struct {
	dollars bool   // the dollar quota; else the token quota
	left    int64  // what it has left, in its unit (tokens, nano-dollars)
	needs   string // what the request needs of it
}

// needing is s with what a request needs of it.
func (s quotaShort) needing(needs string) quotaShort {
	s.needs = needs
	return s
}

// spentQuota is the quota of k that cannot pay for needed (input tokens
// and minOut output) even once its calls in flight settle: what it has
// left plus what they hold falls short.
func spentQuota(k Key, left, held, needed amounts, input, minOut int64) (quotaShort, bool) {
	if k.QuotaTokens > 0 && left.tokens+held.tokens < needed.tokens {
		s := quotaShort{left: left.tokens, needs: fmt.Sprintf("%d needed (its input)", needed.tokens)}
		if minOut > 0 {
			s.needs = fmt.Sprintf("%d needed (input %d + a minimum output of %d)", needed.tokens, input, minOut)
		}
		return s, true
	}
	if k.QuotaDollars > 0 && left.nano+held.nano < needed.nano {
		s := quotaShort{dollars: true, left: left.nano, needs: fmt.Sprintf("%s needed (its input of %d tokens at its models' prices)", dollarsText(needed.nano), input)}
		if minOut > 0 {
			s.needs = fmt.Sprintf("%s needed (input %d + a minimum output of %d tokens at its models' prices)", dollarsText(needed.nano), input, minOut)
		}
		return s, true
	}
	return quotaShort{}, false
}

// refuseQuota answers 403 insufficient_quota: the key's quota s cannot
// pay for the request before it resets. Nothing is reserved or sent.
func (g *Gateway) refuseQuota(w http.ResponseWriter, q *request, s quotaShort, reset time.Time) {
	k := q.key
	g.metrics.refused(k.ID, "quota")
	msg := fmt.Sprintf("The %s quota of key %s (%d tokens per %s) is spent: %d tokens left, %s. It resets at %s.",
		k.QuotaPeriod, k.ID, k.QuotaTokens, k.QuotaPeriod, max(s.left, 0), s.needs, reset.UTC().Format(time.RFC3339))
	if s.dollars {
		dollarHeaders(w.Header(), k, s.left, reset)
		msg = fmt.Sprintf("The %s dollar quota of key %s (%s per %s) is spent: %s left, %s. It resets at %s.",
			k.QuotaPeriod, k.ID, dollarsText(ratelimit.Nano(k.QuotaDollars)), k.QuotaPeriod, dollarsText(max(s.left, 0)), s.needs, reset.UTC().Format(time.RFC3339))
	} else {
		quotaHeaders(w.Header(), k, s.left, reset)
	}
	q.fail(w, http.StatusForbidden, "insufficient_quota", "quota_exceeded", msg)
}

// quotaHeaders describe the key's token quota in prq's own headers
// (OpenAI's x-ratelimit-* describe per-minute limits: rateHeaders).
func quotaHeaders(h http.Header, k Key, remaining int64, reset time.Time) {
	if k.QuotaTokens <= 0 {
		return
	}
	h.Set("x-prq-quota-limit", strconv.FormatInt(k.QuotaTokens, 10))
	h.Set("x-prq-quota-remaining", strconv.FormatInt(max(remaining, 0), 10))
	h.Set("x-prq-quota-reset", reset.UTC().Format(time.RFC3339))
}

// dollarHeaders describe the key's dollar quota, in dollars.
func dollarHeaders(h http.Header, k Key, remainingNano int64, reset time.Time) {
	if k.QuotaDollars <= 0 {
		return
	}
	h.Set("x-prq-quota-dollars-limit", strconv.FormatFloat(k.QuotaDollars, 'f', -1, 64))
	h.Set("x-prq-quota-dollars-remaining", strings.TrimPrefix(dollarsText(max(remainingNano, 0)), "$"))
	h.Set("x-prq-quota-reset", reset.UTC().Format(time.RFC3339))
}

// quotaNow describes the key's quotas as they are now.
func (g *Gateway) quotaNow(ctx context.Context, h http.Header, k Key) {
	quota := g.quotas[k.QuotaPeriod]
	if k.QuotaTokens > 0 {
		if u, err := quota.Used(ctx, tenantOf(k), "", k.QuotaTokens); err == nil {
			quotaHeaders(h, k, k.QuotaTokens-u.Used, u.Reset)
		}
	}
	if k.QuotaDollars > 0 {
		limit := ratelimit.Nano(k.QuotaDollars)
		if u, err := quota.UsedDollars(ctx, tenantOf(k), "", limit); err == nil {
			dollarHeaders(h, k, limit-u.Used, u.Reset)
		}
	}
}

// settleQuota settles q's reservations as st says (the zero
// Settlement: all given back), by llmcall's one rule, once.
func (g *Gateway) settleQuota(ctx context.Context, q *request, st llmcall.Settlement) {
	if q.hold.Tokens == nil && q.hold.Dollars == nil {
		return
	}
	if err := llmcall.SettleQuotas(ctx, g.quotas[q.key.QuotaPeriod], q.hold, st); err != nil {
		g.log.WarnContext(ctx, "gateway: settling the quota failed; the reservation counts in full until it expires", "key", q.key.ID, "err", err)
	}
	if err := g.held.unhold(ctx, q.key.ID, q.id, false); err != nil {
		g.log.WarnContext(ctx, "gateway: dropping a settled hold failed; the key's waiters count it until it expires", "key", q.key.ID, "err", err)
	}
	g.held.settled(time.Since(q.reserved))
	q.hold = llmcall.QuotaHold{} // settled once
}
