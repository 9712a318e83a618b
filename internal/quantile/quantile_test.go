package quantile

import (
	"testing"
	"time"
)

func TestOf(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		q    float64
		want float64
	}{
		{"empty", nil, .5, 0},
		{"one", []float64{3}, .99, 3},
		{"median of odd", []float64{5, 1, 3}, .5, 3},
		{"median of even takes the upper", []float64{4, 1, 3, 2}, .5, 3},
		{"p95 of ten", []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, .95, 10},
		{"max", []float64{2, 7, 1}, 1, 7},
		{"min", []float64{2, 7, 1}, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]float64(nil), tt.xs...)
			if got := Of(tt.xs, tt.q); got != tt.want {
				t.Fatalf("Of(%v, %g) = %g, want %g", tt.xs, tt.q, got, tt.want)
			}
			for i := range in {
				if in[i] != tt.xs[i] {
					t.Fatalf("Of sorted its input")
				}
			}
		})
	}
	if got := Of([]time.Duration{3 * time.Second, time.Second, 2 * time.Second}, .5); got != 2*time.Second {
		t.Fatalf("durations: median %s, want 2s", got)
	}
}
