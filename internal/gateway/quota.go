package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prq-dev/prq/ratelimit"
)

// quotaPoll bounds how long a waiter misses a settle in another process.
const quotaPoll = 100 * time.Millisecond

// reserveQuota reserves the key's quota for q: input plus want output
// per choice, capped to what is left (q.cap), waiting while others hold
// what it needs (held.go). False: answered, nothing reserved.
func (g *Gateway) reserveQuota(w http.ResponseWriter, r *http.Request, q *request, want int64) bool {
	k := q.key
	q.cap = want
	if k.QuotaTokens <= 0 {
		return true
	}
	ctx := r.Context()
	bg := context.WithoutCancel(ctx)
	quota := g.quotas[k.QuotaPeriod]
	// a token per choice at least; for a request without output
	// (embeddings) only its input, as Reserve asks
	needed, least := q.input+max(g.cfg.MinOutput, q.n), int64(1)
	if want == 0 {
		needed, least = q.input, 0
	}
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
		st, err := g.held.turn(wctx, k.ID, q.id, q.deadline, q.input+want*q.n)
		if err == nil && st.turn {
			var gr ratelimit.Grant
			gr, err = quota.Reserve(wctx, tenantOf(k), "", q.id, k.QuotaTokens, q.input, want*q.n)
			if err == nil && gr.Cap/q.n >= least {
				q.grant, q.cap = &gr, gr.Cap/q.n
				q.reserved = time.Now()
				if err := g.held.granted(bg, k.ID, q.id, gr.Input+gr.Cap); err != nil {
					g.log.WarnContext(ctx, "gateway: recording a held reservation failed; the key's waiters count it when it expires", "key", k.ID, "err", err)
				}
				g.metrics.quotaWaited(k.ID, time.Since(start))
				return true
			}
			left := int64(0)
			var qe *ratelimit.QuotaError
			switch {
			case err == nil: // room for the minimum, not for a token per choice
				left = gr.Remaining + gr.Input + gr.Cap
				if serr := quota.Settle(bg, gr, 0); serr != nil {
					g.log.WarnContext(ctx, "gateway: giving back a quota reservation failed", "key", k.ID, "err", serr)
				}
				err = nil
			case errors.As(err, &qe):
				left, err = qe.Remaining, nil
			}
			if err == nil {
				if uerr := g.held.unhold(bg, k.ID, q.id, false); uerr != nil {
					g.log.WarnContext(ctx, "gateway: dropping a refused hold failed", "key", k.ID, "err", uerr)
				}
				if left+st.held < needed {
					// spent: even with nothing held it cannot cover the request
					leave()
					g.refuseQuota(w, q, left, g.quotaReset(k), neededText(needed, q.input))
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
		if u, err := quota.Used(bg, tenantOf(k), "", k.QuotaTokens); err == nil {
			g.quotaHeaders(w.Header(), k, k.QuotaTokens-u.Used, u.Reset)
		}
		q.fail(w, http.StatusTooManyRequests, "requests", "rate_limit_exceeded", fmt.Sprintf(
			"Key %s's quota is held by its requests in flight (%d tokens) and did not free %d tokens within %s. Please try again in %s.",
			k.ID, st.held, needed, q.maxWait, retry.Round(time.Second)))
		return false
	}
}

// neededText says what a refused request needed of the quota.
func neededText(needed, input int64) string {
	if needed == input {
		return fmt.Sprintf("%d needed (its input)", needed)
	}
	return fmt.Sprintf("%d needed (input %d + a minimum output of %d)", needed, input, needed-input)
}
