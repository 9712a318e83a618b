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
