package ratelimit_test

import (
	"math"
	"time"

	"github.com/prq-dev/prq/ratelimit"
)

// The reference model: the bucket and the window limiter written plainly,
// from what docs/limiter.md says they do, with none of the Lua's
// incremental sums, caches or stored fields. The differential test
// (differential_test.go) runs both on the same operations and requires
// the same decisions. It covers what Bucket's Reserve, Settle and
// Available do with a window margin set (not measured), which is what a
// change to the library's arithmetic moves; the measured margin's
// credits and a call's exact arrival (admission's sent and arrived) are
// left to their own tests.

// modelDim is one dimension: a token bucket or a sliding window.
type modelDim struct {
	window bool
	limit  int64
	// bucket: level in units·µs of period (tokens × period_us), refilled
	// at limit per µs up to burst × period
	per, burst, level, last int64
	// window: at most limit in any span (the window plus its margin), at
	// most sublimit in any sub span (0: none), summed in slots of slot µs
	span, sub, sublimit, slot int64
	slots                     map[int64]*modelSlot
	high                      int64 // the newest slot written (its first: the slot before now's)
}

// modelSlot is what one slot holds: its value and its latest charge's time.
type modelSlot struct{ value, latest int64 }

// modelReservation is what a reserve charged, per dimension, and when.
type modelReservation struct {
	costs []int64
	at    int64
}

// model is one limiter's dimensions and its open reservations.
type model struct {
	dims   []*modelDim
	policy ratelimit.Policy
	res    map[string]modelReservation
}

// newModel builds the model of limits with requests and tokens per
// period (the only dimensions the differential test configures), as
// Bucket builds its script's arguments.
func newModel(l ratelimit.Limits, now int64) *model {
	m := &model{policy: l.Policy, res: map[string]modelReservation{}}
	for _, d := range []struct{ limit, burst int64 }{{l.RequestsPerPeriod, l.BurstRequests}, {l.TokensPerPeriod, l.BurstTokens}} {
		if l.Limiter != ratelimit.LimiterWindow {
			per := l.Period.Microseconds()
			m.dims = append(m.dims, &modelDim{limit: d.limit, per: per, burst: d.burst, level: d.burst * per, last: now})
			continue
		}
		margin := l.WindowMargin.Microseconds()
		md := &modelDim{window: true, limit: d.limit, burst: d.limit, span: l.Window.Microseconds() + margin, slots: map[int64]*modelSlot{}}
		shortest := l.Window
		if l.SubWindow > 0 {
			md.sub, md.sublimit, shortest = l.SubWindow.Microseconds()+margin, int64(l.SubWindowShare*float64(d.limit)), l.SubWindow
			md.burst = min(md.burst, md.sublimit)
		}
		md.slot = max(shortest.Microseconds()/120, 1)
		md.high = floorDiv(now-md.span, md.slot) - 1
		m.dims = append(m.dims, md)
	}
	return m
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// refill brings a bucket dimension up to now.
func (d *modelDim) refill(now int64) {
	if e := now - d.last; e > 0 {
		d.level = min(d.level+e*d.limit, d.burst*d.per)
		d.last = now
	}
}

// counts reports whether slot j still counts in a span at now: its
// latest charge is no older than the span.
func (d *modelDim) counts(j int64, span, now int64) bool {
	s, ok := d.slots[j]
	return ok && s.latest >= now-span
}

// used is what a span holds at now, and its slots oldest first.
func (d *modelDim) used(span, now int64) (int64, []int64) {
	var sum int64
	var js []int64
	for j := floorDiv(now-span, d.slot); j <= d.high; j++ {
		if d.counts(j, span, now) {
			sum += d.slots[j].value
			js = append(js, j)
		}
	}
	return sum, js
}

// spanWait is the µs until cost fits in one span: until enough of its
// oldest slots have stopped counting.
func (d *modelDim) spanWait(limit, span, cost, now int64) int64 {
	sum, js := d.used(span, now)
	need := sum + cost - limit
	if need <= 0 {
		return 0
	}
	var acc, late int64 = 0, math.MinInt64
	for _, j := range js {
		s := d.slots[j]
		if s.value <= 0 {
			continue
		}
		acc += s.value
		late = max(late, s.latest)
		if acc >= need {
			return max(late+1+span-now, 1)
		}
	}
	return max((d.high+1)*d.slot+span-now, 1)
}

// wait is the µs until cost fits in the dimension, 0 now.
func (d *modelDim) wait(cost, now int64) int64 {
	if !d.window {
		d.refill(now)
		need := min(cost, d.burst) * d.per
		if d.level >= need {
			return 0
		}
		return int64(math.Ceil(float64(need-d.level) / float64(d.limit)))
	}
	w := d.spanWait(d.limit, d.span, cost, now)
	if d.sub > 0 {
		w = max(w, d.spanWait(d.sublimit, d.sub, cost, now))
	}
	return w
}

// charge takes amount at now.
func (d *modelDim) charge(amount, now int64) {
	if !d.window {
		d.refill(now)
		d.level -= amount * d.per
		return
	}
	j := floorDiv(now, d.slot)
	s := d.slots[j]
	if s == nil {
		s = &modelSlot{}
		d.slots[j] = s
	}
	if amount > 0 {
		if s.value <= 0 {
			s.latest = now
		} else {
			s.latest = max(s.latest, now)
		}
	}
	s.value += amount
	d.high = max(d.high, j)
}

// give gives amount back (negative: charges more now), charged at at: a
// window gives it back in that slot while the slot still counts.
func (d *modelDim) give(amount, at, now int64) {
	if !d.window {
		d.refill(now)
		d.level = min(d.level+amount*d.per, d.burst*d.per)
		return
	}
	if amount < 0 {
		d.charge(-amount, now)
		return
	}
	j := floorDiv(at, d.slot)
	if amount > 0 && j <= d.high && d.counts(j, d.span, now) {
		s := d.slots[j]
		s.value -= min(amount, s.value)
	}
}

// available is what Bucket.Available reports of the dimension.
func (d *modelDim) available(now int64) int64 {
	if !d.window {
		d.refill(now)
		return floorDiv(d.level, d.per)
	}
	sum, _ := d.used(d.span, now)
	level := d.limit - sum
	if d.sub > 0 {
		subsum, _ := d.used(d.sub, now)
		level = min(level, d.sublimit-subsum)
	}
	return level
}

// modelDecision is what a reserve decided.
type modelDecision struct {
	admitted  bool
	duplicate bool
	wait      time.Duration
	errDim    int // 1-based dimension of a cost that never fits, 0 none
}

// reserve charges costs (per dimension) for id if they fit now.
func (m *model) reserve(id string, costs []int64, now int64) modelDecision {
	if _, ok := m.res[id]; ok {
		return modelDecision{admitted: true, duplicate: true}
	}
	var w int64
	for i, d := range m.dims {
		if costs[i] < 0 || costs[i] > d.burst {
			return modelDecision{errDim: i + 1}
		}
		w = max(w, d.wait(costs[i], now))
	}
	if w > 0 {
		return modelDecision{wait: time.Duration(w) * time.Microsecond}
	}
	for i, d := range m.dims {
		d.charge(costs[i], now)
	}
	m.res[id] = modelReservation{costs: costs, at: now}
	return modelDecision{admitted: true}
}

// settle replaces id's charges with its usage (−1: unknown) under the
// policy (refund when no call was made); false when id holds none.
func (m *model) settle(id string, usage []int64, nocall bool, now int64) bool {
	r, ok := m.res[id]
	if !ok {
		return false
	}
	delete(m.res, id)
	policy := m.policy
	if nocall {
		policy = ratelimit.PolicyRefund
	}
	for i, d := range m.dims {
		if usage[i] < 0 {
			continue
		}
		delta := r.costs[i] - usage[i]
		if policy == ratelimit.PolicyRefund || (policy == ratelimit.PolicyDebt && delta < 0) {
			d.give(delta, r.at, now)
		}
	}
	return true
}
