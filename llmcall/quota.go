package llmcall

import (
	"context"
	"errors"
	"fmt"

	"github.com/prq-dev/prq/ratelimit"
)

// A call's tenant (an installation, a gateway key) may have a quota of
// tokens, of dollars, or both, per period; the call must fit both. Both
// are reserved the same way, for the workers' jobs and the gateway's
// requests alike: the input plus the output cap, the cap cut to what the
// tighter quota leaves. A quota of dollars reserves the input at the
// model's dearest input price (a cache write may cost more than the
// input) and the output at its output price, in nano-dollars
// (QuotaPrices), and is settled with the call's cost from its usage
// (Settle, SettleQuotas): the price of a call served from the cache or
// by flex processing is less, the rest is given back.

// Quotas are a tenant's quotas (a *ratelimit.Quota).
type Quotas interface {
	QuotaSettler
	Reserve(ctx context.Context, tenant, agent, id string, limit, input, output int64) (ratelimit.Grant, error)
	ReserveDollars(ctx context.Context, tenant, agent, id string, limit, input, output, inPrice, outPrice int64) (ratelimit.Grant, error)
	UsedDollars(ctx context.Context, tenant, agent string, limit int64) (ratelimit.Usage, error)
}

// QuotaSettler settles a reservation of a tenant's quota (a
// *ratelimit.Quota).
type QuotaSettler interface {
	Settle(ctx context.Context, g ratelimit.Grant, actual int64) error
}

var _ Quotas = (*ratelimit.Quota)(nil)

// QuotaAsk is what a call asks of its tenant's quotas.
type QuotaAsk struct {
	Tenant string
	// Agent and DollarAgent name the token and the dollar quota drawn on
	// ("": the tenant's whole).
	Agent, DollarAgent string
	// ID names the reservations (the ticket, the request): the same ID
	// reserves once.
	ID string
	// Tokens is the token quota per period (0: none), Nano the dollar
	// quota per period in nano-dollars (0: none).
	Tokens, Nano int64
	// Input is the call's input tokens, Output the output it asks for
	// (all its choices): the cap, cut to what the quotas leave.
	Input, Output int64
	// Least is the output the call needs at least (0: none): quotas that
	// leave less are given back, as if they could not pay.
	Least int64
	// InPrice and OutPrice are a token's price under the dollar quota,
	// in nano-dollars (QuotaPrices).
	InPrice, OutPrice int64
}

// QuotaHold is what a call holds of its tenant's quotas: a reservation
// of tokens and one of dollars (nil: no such quota), and the output cap
// they leave it.
type QuotaHold struct {
	Tokens, Dollars *ratelimit.Grant
	Cap             int64
}

// Held is what h's reservations hold: tokens, nano-dollars.
func (h QuotaHold) Held() (tokens, nano int64) {
	if h.Tokens != nil {
		tokens = h.Tokens.Reserved
	}
	if h.Dollars != nil {
		nano = h.Dollars.Reserved
	}
	return tokens, nano
}

// QuotaShort reports quotas that cannot pay for a call: nothing stays
// reserved.
type QuotaShort struct {
	// Dollars: the dollar quota refused; else the token quota, or both
	// paid and left less than the least output (Refused nil).
	Dollars bool
	// Refused is the quota's refusal (its reset, whether one ever lets
	// the call through); nil: the least output did not fit.
	Refused *ratelimit.QuotaError
	// LeftTokens and LeftNano are what each quota has left now.
	LeftTokens, LeftNano int64
}

func (e *QuotaShort) Error() string {
	if e.Refused != nil {
		return e.Refused.Error()
	}
	return fmt.Sprintf("llmcall: the quotas leave less than the least output (%d tokens, %d nano-dollars left)", e.LeftTokens, e.LeftNano)
}

// Unwrap is the quota's refusal: errors.Is(err,
// ratelimit.ErrQuotaExceeded) holds for a refusal.
func (e *QuotaShort) Unwrap() error {
	if e.Refused == nil {
		return nil
	}
	return e.Refused
}

// ReserveQuota reserves a in q: the token quota first, then the dollar
// quota for the output the tokens leave; when the dollars cut the output
// further, the tokens are reserved again for the output the call may
// use, so that they hold no more. Quotas that cannot pay come back as a
// *QuotaShort with everything given back; another failure as itself,
// what was reserved given back.
func ReserveQuota(ctx context.Context, q Quotas, a QuotaAsk) (QuotaHold, error) {
	r := reservation{q: q, a: a, h: QuotaHold{Cap: a.Output}}
	return r.reserve(ctx)
}

// reservation is one ReserveQuota in progress.
type reservation struct {
	q    Quotas
	a    QuotaAsk
	h    QuotaHold
	left QuotaShort
	errs []error // failures to give back
}

func (r *reservation) reserve(ctx context.Context) (QuotaHold, error) {
	a := r.a
	var qe *ratelimit.QuotaError
	if a.Tokens > 0 {
		err := r.reserveTokens(ctx, r.h.Cap)
		if errors.As(err, &qe) {
			r.left.LeftTokens = qe.Remaining
			if a.Nano > 0 { // is it spent too?
				u, err := r.q.UsedDollars(ctx, a.Tenant, a.DollarAgent, a.Nano)
				if err != nil {
					return QuotaHold{}, err
				}
				r.left.LeftNano = a.Nano - u.Used
			}
			return r.short(qe, false)
		}
		if err != nil {
			return QuotaHold{}, err
		}
		r.h.Cap = r.h.Tokens.Cap
	}
	if a.Nano > 0 {
		g, err := r.q.ReserveDollars(ctx, a.Tenant, a.DollarAgent, a.ID, a.Nano, a.Input, r.h.Cap, a.InPrice, a.OutPrice)
		if err != nil {
			return r.undo(ctx, err, true)
		}
		r.h.Dollars = &g
		if t := r.h.Tokens; t != nil && g.Cap < t.Cap {
			// the dollars cut the output further: the tokens reserve
			// only what the call may use
			r.h.Tokens = nil
			if err := r.q.Settle(context.WithoutCancel(ctx), *t, 0); err != nil && !errors.Is(err, ratelimit.ErrNotReserved) {
				return r.undo(ctx, err, false)
			}
			if err := r.reserveTokens(ctx, g.Cap); err != nil { // refused: another call took it meanwhile
				return r.undo(ctx, err, false)
			}
		}
		r.h.Cap = g.Cap
		if r.h.Tokens != nil {
			r.h.Cap = min(r.h.Cap, r.h.Tokens.Cap)
		}
	}
	if r.h.Cap < a.Least { // room for the call, not for its least output
		r.giveBack(ctx)
		return r.short(nil, false)
	}
	return r.h, nil
}

func (r *reservation) reserveTokens(ctx context.Context, output int64) error {
	g, err := r.q.Reserve(ctx, r.a.Tenant, r.a.Agent, r.a.ID, r.a.Tokens, r.a.Input, output)
	if err == nil {
		r.h.Tokens = &g
	}
	return err
}

// undo gives back what is reserved after err: a quota's refusal (of the
// dollars, else the tokens) comes back as a *QuotaShort, another failure
// as itself.
func (r *reservation) undo(ctx context.Context, err error, dollars bool) (QuotaHold, error) {
	r.giveBack(ctx)
	var qe *ratelimit.QuotaError
	if !errors.As(err, &qe) {
		return r.fail(err)
	}
	if dollars {
		r.left.LeftNano = qe.Remaining
	} else {
		r.left.LeftTokens = qe.Remaining
	}
	return r.short(qe, dollars)
}

// giveBack gives back what is reserved, which tells what each quota has
// left.
func (r *reservation) giveBack(ctx context.Context) {
	for _, g := range []*ratelimit.Grant{r.h.Tokens, r.h.Dollars} {
		if g == nil {
			continue
		}
		if err := r.q.Settle(context.WithoutCancel(ctx), *g, 0); err != nil && !errors.Is(err, ratelimit.ErrNotReserved) {
			r.errs = append(r.errs, fmt.Errorf("llmcall: give back a quota reservation (it counts in full until it expires): %w", err))
		}
	}
	if g := r.h.Tokens; g != nil {
		r.left.LeftTokens = g.Remaining + g.Reserved
	}
	if g := r.h.Dollars; g != nil {
		r.left.LeftNano = g.Remaining + g.Reserved
	}
	r.h = QuotaHold{}
}

// short is the quotas' refusal (qe nil: the least output did not fit),
// with any failure to give back joined.
func (r *reservation) short(qe *ratelimit.QuotaError, dollars bool) (QuotaHold, error) {
	s := r.left
	s.Refused, s.Dollars = qe, dollars
	return r.fail(&s)
}

// fail is err, with any failure to give back joined.
func (r *reservation) fail(err error) (QuotaHold, error) {
	if len(r.errs) == 0 {
		return QuotaHold{}, err
	}
	return QuotaHold{}, errors.Join(append([]error{err}, r.errs...)...)
}

// QuotaPrices are m's prices under a dollar quota, in nano-dollars per
// token, rounded up: the input at its dearest (a cache write may cost
// more than the input), and the output; batch: at batch prices. A
// reservation at these never holds too little.
func (m Model) QuotaPrices(batch bool) (in, out int64) {
	pr := m.Prices
	if batch {
		pr = pr.Batch()
	}
	return ratelimit.NanoPerToken(max(pr.Input, pr.CachedInput, pr.CacheWrite)), ratelimit.NanoPerToken(pr.Output)
}

// SettleQuotas settles a call's reservations (h) as st says: what it
// spent, or all they reserved (InFull). A reservation gone already
// (ErrNotReserved) is fine; the others' failures come back joined: those
// reservations count in full until they expire.
func SettleQuotas(ctx context.Context, q QuotaSettler, h QuotaHold, st Settlement) error {
	var errs []error
	for _, s := range []struct {
		g      *ratelimit.Grant
		actual int64
	}{{h.Tokens, st.Tokens}, {h.Dollars, st.Nano}} {
		if s.g == nil {
			continue
		}
		actual := s.actual
		if st.InFull {
			actual = s.g.Reserved
		}
		if err := q.Settle(context.WithoutCancel(ctx), *s.g, actual); err != nil && !errors.Is(err, ratelimit.ErrNotReserved) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
