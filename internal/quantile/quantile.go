// Package quantile computes nearest-rank quantiles of samples, the one
// definition the dashboard, the benchmark and the chaos report share. It
// owns no storage or histograms (Prometheus does that for /metrics).
package quantile

import (
	"cmp"
	"slices"
)

// Of returns the q-quantile (0 ≤ q ≤ 1) of xs by nearest rank: the
// element at index ⌊q·n⌋ of the sorted samples, capped at the last one;
// the zero value when there are none. xs is not modified.
func Of[T cmp.Ordered](xs []T, q float64) T {
	var zero T
	if len(xs) == 0 {
		return zero
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
