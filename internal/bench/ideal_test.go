package bench

import (
	"fmt"
	"math"
	"testing"
	"time"
)

func TestRunOf(t *testing.T) {
	for _, c := range []struct {
		task, run string
		index     int
	}{
		{"review-1.tenant-1.bullmq.76-000000000000-5-rmx4jjs4d", "review-1.tenant-1.bullmq.76-000000000000-rmx4jjs4d", 5},
		{"summary-acme.widgets.7-abcdef0-12-r1", "summary-acme.widgets.7-abcdef0-r1", 12},
		{"chat-42", "chat-42", 0},
		{"odd-task-name", "odd-task-name", 0},
	} {
		if run, i := runOf(c.task); run != c.run || i != c.index {
			t.Errorf("runOf(%q) = %q, %d; want %q, %d", c.task, run, i, c.run, c.index)
		}
	}
}

// TestIdealAdmissions: the simulated admission takes each call the moment
// the window has room and the order allows: in order, the next call
// holds everyone; with a run's files reordered, a later file of the
// waiting call's run that fits goes (another run's does not); in any
// order, whatever fits goes.
func TestIdealAdmissions(t *testing.T) {
	t0 := time.Unix(1_900_000_000, 0)
	call := func(run string, index int, tokens int64) callRecord {
		return callRecord{Task: fmt.Sprintf("review-%s-sha-%d-r1", run, index), Created: t0.UnixMilli(), Tokens: tokens, Model: "m"}
	}
	calls := []callRecord{call("a", 0, 600), call("a", 1, 900), call("a", 2, 300), call("b", 0, 100), call("c", 0, 5000)}
	for _, c := range []struct {
		order idealOrder
		want  string // seconds after t0 of each admission, in ledger order
	}{
		{idealInOrder, "[600@0 900@1 300@2 100@2]"},
		{idealSameRun, "[600@0 300@0 900@1 100@1]"},
		{idealAnyOrder, "[600@0 300@0 100@0 900@1]"},
	} {
		adm, waits := idealAdmissions(calls, 1000, time.Second, c.order)
		var got []string
		for _, a := range adm {
			got = append(got, fmt.Sprintf("%d@%g", a.Cost, a.At.Sub(t0).Seconds()))
		}
		if fmt.Sprint(got) != c.want {
			t.Errorf("order %d: admitted %v, want %s (the 5000 can never fit: dropped)", c.order, got, c.want)
		}
		if len(waits) != 1 || !waits[0].from.Equal(t0) {
			t.Errorf("order %d: waits %v, want one span from the calls' creation", c.order, waits)
		}
	}
}

// TestIdealFills: calls that pack the window exactly fill it whole with
// no hold; with a hold of a tenth of the window, the ten pairs come every
// 1.1 s and the windows sampled (from 1 s to 9.9 s) are empty for 0.1 s
// after each of the first nine pairs leaves.
func TestIdealFills(t *testing.T) {
	t0 := time.Unix(1_900_000_000, 0)
	var calls []callRecord
	for i := 0; i < 20; i++ {
		calls = append(calls, callRecord{Task: fmt.Sprintf("review-p-sha-%d-r1", i), Created: t0.UnixMilli(), Tokens: 500, Model: "m"},
			callRecord{Task: fmt.Sprintf("chat-%d", i), Created: t0.UnixMilli(), Tokens: 500, Model: "other"})
	}
	for _, c := range []struct {
		hold time.Duration
		want float64
	}{
		{0, 1},
		{100 * time.Millisecond, 1 - 0.9/8.9},
	} {
		f := idealFillsOf(calls, "m", 1000, time.Second, c.hold)
		for name, got := range map[string]float64{"in order": f.InOrder, "same run": f.SameRun, "any order": f.AnyOrder} {
			if math.Abs(got-c.want) > 0.002 {
				t.Errorf("hold %s, %s: fill %.4f, want %.4f", c.hold, name, got, c.want)
			}
		}
	}
}
