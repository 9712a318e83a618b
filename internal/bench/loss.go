package bench

import (
	"sort"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
)

// utilisationLoss says where the part of a model's allowance that was
// not used went, as fractions of the allowance (burst + rate·span from
// the first admission to the last, the utilisation figure's
// denominator). It replays the provider's own bucket over its recorded
// admissions: a token is lost when the bucket is full and refills past
// its burst, or when it is still in the bucket at the last admission.
type utilisationLoss struct {
	// WhileQueued: refill lost while a job of the model had been created
	// and not yet called (admission or release was late, or held back).
	WhileQueued float64 `json:"while_queued"`
	// NothingQueued: refill lost while no job of the model waited.
	NothingQueued float64 `json:"nothing_queued"`
	// LeftAtEnd: tokens still in the bucket at the last admission.
	LeftAtEnd float64 `json:"left_at_end"`
	// LeftSinceS: how long before the last admission the bucket was last
	// drained (below a tenth of its burst), and LeftWhileQueued the part
	// of LeftAtEnd that built up while jobs waited (the rest built up in
	// the tail, with nothing to admit).
	LeftSinceS      float64 `json:"left_since_s"`
	LeftWhileQueued float64 `json:"left_while_queued"`
}

// lossOf replays adm against a bucket of burst refilled at limit per
// period; calls give when jobs of the model waited.
func lossOf(adm []fakeopenai.Admission, calls []callRecord, model string, limit int64, period time.Duration, burst int64) utilisationLoss {
	var out utilisationLoss
	if len(adm) < 2 || limit <= 0 || period <= 0 {
		return out
	}
	if burst <= 0 {
		burst = limit
	}
	a := append([]fakeopenai.Admission(nil), adm...)
	sort.Slice(a, func(i, j int) bool { return a[i].At.Before(a[j].At) })
	queued := waitingSpans(calls, model)
	rate := float64(limit) / float64(period.Microseconds()) // tokens per µs
	level := float64(burst)
	var lostQ, lostIdle float64
	drained := a[0].At // when the bucket was last below a tenth of its burst
	for i, x := range a {
		if i > 0 {
			dt := float64(x.At.Sub(a[i-1].At).Microseconds())
			if refill := rate * dt; level+refill > float64(burst) {
				// full from t until x.At: what refilled then was lost
				full := a[i-1].At.Add(time.Duration((float64(burst)-level)/rate) * time.Microsecond)
				q := covered(queued, full, x.At)
				lostQ += rate * float64(q.Microseconds())
				lostIdle += rate * float64(x.At.Sub(full).Microseconds()-q.Microseconds())
				level = float64(burst)
			} else {
				level += refill
			}
		}
		level -= float64(x.Cost)
		if level < float64(burst)/10 {
			drained = x.At
		}
	}
	end := a[len(a)-1].At
	allowed := float64(burst) + rate*float64(end.Sub(a[0].At).Microseconds())
	out.WhileQueued, out.NothingQueued, out.LeftAtEnd = lostQ/allowed, lostIdle/allowed, max(level, 0)/allowed
	out.LeftSinceS = end.Sub(drained).Seconds()
	if since := end.Sub(drained); since > 0 {
		out.LeftWhileQueued = out.LeftAtEnd * float64(covered(queued, drained, end)) / float64(since)
	}
	return out
}

type span struct{ from, to time.Time }

// waitingSpans merges the intervals in which jobs of the model had been
// created and not yet called.
func waitingSpans(calls []callRecord, model string) []span {
	var ss []span
	for _, c := range calls {
		if c.Model == model && c.Outcome != "429" && c.At > c.Created {
			ss = append(ss, span{time.UnixMilli(c.Created), time.UnixMilli(c.At)})
		}
	}
	return mergeSpans(ss)
}

// mergeSpans merges overlapping spans, sorted by start.
func mergeSpans(ss []span) []span {
	sort.Slice(ss, func(i, j int) bool { return ss[i].from.Before(ss[j].from) })
	var out []span
	for _, s := range ss {
		if n := len(out); n > 0 && !s.from.After(out[n-1].to) {
			if s.to.After(out[n-1].to) {
				out[n-1].to = s.to
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

// covered is how much of [from, to) the spans cover.
func covered(ss []span, from, to time.Time) time.Duration {
	var d time.Duration
	for _, s := range ss {
		a, b := s.from, s.to
		if from.After(a) {
			a = from
		}
		if to.Before(b) {
			b = to
		}
		if b.After(a) {
			d += b.Sub(a)
		}
	}
	return d
}

// backloggedFill is the mean fill, over limit, of the windows of length w
// during all of which a job waited (queued covers the whole window),
// sampled a hundred per window length from one window after the first
// admission to the last; and how many such windows there were. Windows
// in which the work had not arrived yet, or was all admitted at once,
// say nothing of how full a limiter keeps the provider while work waits.
func backloggedFill(adm []fakeopenai.Admission, queued []span, limit int64, w time.Duration) (float64, int) {
	if limit <= 0 {
		return 0, 0
	}
	var fill float64
	n := backloggedWindows(adm, queued, w, func(_ time.Time, sum int64) {
		fill += float64(sum) / float64(limit)
	})
	if n == 0 {
		return 0, 0
	}
	return fill / float64(n), n
}

// backloggedWindows calls f with the end and the admitted cost of each
// window of length w during all of which a job waited (queued covers
// it), sampled a hundred per window length from one window after the
// first admission to the last; it returns how many there were.
func backloggedWindows(adm []fakeopenai.Admission, queued []span, w time.Duration, f func(t time.Time, sum int64)) int {
	if len(adm) < 2 || w <= 0 {
		return 0
	}
	a := append([]fakeopenai.Admission(nil), adm...)
	sort.Slice(a, func(i, j int) bool { return a[i].At.Before(a[j].At) })
	n, lo, hi, sum := 0, 0, 0, int64(0)
	for t := a[0].At.Add(w); !t.After(a[len(a)-1].At); t = t.Add(w / 100) {
		for hi < len(a) && !a[hi].At.After(t) {
			sum += a[hi].Cost
			hi++
		}
		for lo < hi && !a[lo].At.After(t.Add(-w)) {
			sum -= a[lo].Cost
			lo++
		}
		if covered(queued, t.Add(-w), t) < w {
			continue
		}
		n++
		f(t, sum)
	}
	return n
}

// windowGap splits the room a window provider had unused, in the windows
// backloggedFill samples (a job of the model waited throughout), as
// shares of the limit:
//   - Packing: room prq saw too, below the smallest ticket waiting for
//     admission;
//   - Hold: room prq could not use because it counts each call from its
//     call for hold(call) (the window margin, or for a call whose reply
//     bounded its way, that way) longer than the provider's window;
//   - Transit: room held in prq's window by calls admitted and not sent
//     yet (admission charges at once; the provider counts on arrival);
//     where every waiting ticket is already admitted, all of the rest;
//   - Fitting: room prq saw too, with a waiting ticket that fit: the
//     order held it (the next ticket did not fit, and this one was of
//     another run) or the admission loop had not acted yet.
//
// A call's admission time is its record's Admitted, else its handler
// start (a baseline has no admission).
type windowGap struct {
	Packing float64 `json:"packing"`
	Hold    float64 `json:"hold"`
	Transit float64 `json:"transit"`
	Fitting float64 `json:"fitting"`
}

func windowGapOf(adm []fakeopenai.Admission, calls []callRecord, model string, limit int64, w time.Duration, hold func(callRecord) time.Duration) windowGap {
	var out windowGap
	if limit <= 0 {
		return out
	}
	var mine []callRecord
	for _, c := range calls {
		if c.Model == model && c.Outcome != "429" {
			if c.Admitted == 0 || c.Admitted > c.At {
				c.Admitted = c.Start
			}
			mine = append(mine, c)
		}
	}
	ms := func(t time.Time) int64 { return t.UnixMilli() }
	share := func(n int64) float64 { return float64(n) / float64(limit) }
	n := backloggedWindows(adm, waitingSpans(calls, model), w, func(t time.Time, sum int64) {
		room := max(limit-sum, 0)
		if room == 0 {
			return
		}
		now := ms(t)
		smallest, held, transit := int64(-1), int64(0), int64(0)
		for _, c := range mine {
			switch {
			case c.Created <= now && c.Admitted > now:
				if smallest < 0 || c.Tokens < smallest {
					smallest = c.Tokens
				}
			case c.Admitted <= now && c.At > now:
				transit += c.Tokens
			case c.At > ms(t.Add(-w-hold(c))) && c.At <= ms(t.Add(-w)):
				held += c.Tokens
			}
		}
		// prq's window holds the held and the transit calls too; what is
		// left is prq's own room
		h := min(room, held)
		tr := min(room-h, transit)
		rest := room - h - tr
		out.Hold += share(h)
		switch {
		case smallest < 0: // every waiting ticket admitted: on its way
			out.Transit += share(tr + rest)
		case rest < smallest:
			out.Transit += share(tr)
			out.Packing += share(rest)
		default:
			out.Transit += share(tr)
			out.Fitting += share(rest)
		}
	})
	if n > 0 {
		f := float64(n)
		out.Packing, out.Hold, out.Transit, out.Fitting = out.Packing/f, out.Hold/f, out.Transit/f, out.Fitting/f
	}
	return out
}
