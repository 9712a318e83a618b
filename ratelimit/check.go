package ratelimit

import (
	"sort"
	"strconv"
	"strings"
	"time"
)

// Admission is one admitted cost stamped with the limiter's clock.
type Admission struct {
	At   time.Time
	Cost int64
}

// IntervalReport is what CheckIntervals found.
type IntervalReport struct {
	Admissions int
	Total      int64
	// Violations counts intervals [a,b] whose admitted cost exceeded
	// burst + rate·(b−a).
	Violations int
	// WorstRatio is the largest admitted/(burst + rate·(b−a)) over all
	// intervals: ≤ 1 for an exact limiter.
	WorstRatio float64
	// Utilisation is the total admitted over what the limit allowed from
	// the first admission to the last (burst + rate·span).
	Utilisation float64
}

// CheckIntervals verifies that for every interval [a,b] between two
// admissions, the cost admitted in it is at most burst + limit/period·(b−a).
// It is exact (integer arithmetic in microseconds) and O(n²).
func CheckIntervals(adm []Admission, limit int64, period time.Duration, burst int64) IntervalReport {
	a := append([]Admission(nil), adm...)
	sort.Slice(a, func(i, j int) bool { return a[i].At.Before(a[j].At) })
	rep := IntervalReport{Admissions: len(a)}
	if len(a) == 0 {
		return rep
	}
	per := period.Microseconds()
	for i := range a {
		rep.Total += a[i].Cost
		var sum int64
		start := a[i].At.UnixMicro()
		for j := i; j < len(a); j++ {
			sum += a[j].Cost
			dt := a[j].At.UnixMicro() - start
			allowed := burst*per + limit*dt // in cost·µs units
			if sum*per > allowed {
				rep.Violations++
			}
			if r := float64(sum*per) / float64(allowed); r > rep.WorstRatio {
				rep.WorstRatio = r
			}
		}
	}
	span := a[len(a)-1].At.UnixMicro() - a[0].At.UnixMicro()
	rep.Utilisation = float64(rep.Total*per) / float64(burst*per+limit*span)
	return rep
}

// CommandMicrosPerCall reads usec_per_call of a command from the text of
// Redis INFO commandstats (0 when absent): Redis's own CPU time per call.
func CommandMicrosPerCall(info, command string) float64 {
	prefix := "cmdstat_" + command + ":"
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(line[len(prefix):]), ",") {
			if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
				x, _ := strconv.ParseFloat(v, 64)
				return x
			}
		}
	}
	return 0
}

// WindowReport is what CheckWindows found.
type WindowReport struct {
	Admissions int
	Total      int64
	// Violations counts windows (t−W, t] ending at an admission whose
	// admitted cost exceeded the limit.
	Violations int
	// Worst is the largest cost admitted in any window, over the limit:
	// ≤ 1 for an exact window limiter.
	Worst float64
	// Utilisation is how full the windows are on average (windows ending
	// from one window after the first admission to the last): ≤ 1 for an
	// exact window limiter, near 1 when it keeps the limit busy.
	Utilisation float64
	// WhileQueued is the mean fill of the windows ending from the first
	// admission to the last, over the limit: Σ cost·min(W, last−at) /
	// (limit·span), exact. 1 is reachable (the limit at the first
	// admission and every W after). CheckIntervals' Utilisation,
	// total/(limit·(1+span/W)), is the mean fill over [first, last+W]
	// instead: its last W comes after the last admission, when nothing is
	// left to admit, so a window limiter that kept every window full
	// still scores below 1 by up to a window's share of the span.
	WhileQueued float64
}

// CheckWindows verifies that every window (t−W, t] holds at most limit.
// The fullest windows end at an admission, so only those are checked:
// O(n log n).
func CheckWindows(adm []Admission, limit int64, window time.Duration) WindowReport {
	a := append([]Admission(nil), adm...)
	sort.Slice(a, func(i, j int) bool { return a[i].At.Before(a[j].At) })
	rep := WindowReport{Admissions: len(a)}
	w := window.Microseconds()
	var sum int64
	lo := 0
	for i := range a {
		rep.Total += a[i].Cost
		sum += a[i].Cost
		t := a[i].At.UnixMicro()
		for a[lo].At.UnixMicro() <= t-w {
			sum -= a[lo].Cost
			lo++
		}
		if sum > limit {
			rep.Violations++
		}
		if r := float64(sum) / float64(limit); r > rep.Worst {
			rep.Worst = r
		}
	}
	// mean fill of the windows ending on a grid after the first window
	if n := len(a); n > 0 {
		first, last := a[0].At.UnixMicro(), a[n-1].At.UnixMicro()
		if last > first {
			var in float64 // cost·µs inside windows ending in [first, last]
			for _, x := range a {
				in += float64(x.Cost) * float64(min(w, last-x.At.UnixMicro()))
			}
			rep.WhileQueued = in / (float64(limit) * float64(last-first))
		}
		const samples = 1000
		if span := last - first - w; span > 0 {
			var fill float64
			lo, hi, sum := 0, 0, int64(0)
			for k := 0; k <= samples; k++ {
				t := first + w + span*int64(k)/samples
				for hi < n && a[hi].At.UnixMicro() <= t {
					sum += a[hi].Cost
					hi++
				}
				for lo < hi && a[lo].At.UnixMicro() <= t-w {
					sum -= a[lo].Cost
					lo++
				}
				fill += float64(sum) / float64(limit)
			}
			rep.Utilisation = fill / (samples + 1)
		}
	}
	return rep
}
