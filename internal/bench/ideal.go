package bench

import (
	"container/heap"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
)

// idealOrder is the freedom an ideal admission has to take calls out of
// order.
type idealOrder int

const (
	// idealInOrder admits the next call in order or none.
	idealInOrder idealOrder = iota
	// idealSameRun also admits, while the next call waits, the first of
	// the next few calls of its pull request run that fits (prq's
	// same_pr).
	idealSameRun
	// idealAnyOrder admits any waiting call that fits (no order at all).
	idealAnyOrder
)

// sameRunDepth is how many calls of a run idealSameRun looks at, as the
// admission script does.
const sameRunDepth = 8

// idealFills are the backlogged-window fills an admission with no
// latency would reach on the same calls against the same window, in each
// idealOrder.
type idealFills struct {
	InOrder  float64 `json:"in_order"`
	SameRun  float64 `json:"same_run"`
	AnyOrder float64 `json:"any_order"`
}

// idealFillsOf replays the model's calls (each waiting from its creation,
// costing its estimate) against a window of limit per w: every call is
// admitted the moment the order allows and the window has room, and is
// counted hold longer than w, as the limiter counts it. The fill is
// backloggedFill's over the simulated admissions and waits, so it sits
// beside the measured figure as a reference: what packing alone leaves
// unused once latency and reaction are gone. Not a bound: the replay
// takes calls in creation order (prq's weighted fair order packs
// differently) and counts the whole hold (prq's look-ahead admits early).
func idealFillsOf(calls []callRecord, model string, limit int64, w, hold time.Duration) idealFills {
	var mine []callRecord
	for _, c := range calls {
		if c.Model == model && c.Outcome != "429" {
			mine = append(mine, c)
		}
	}
	fill := func(o idealOrder) float64 {
		adm, queued := idealAdmissions(mine, limit, w+hold, o)
		f, _ := backloggedFill(adm, queued, limit, w)
		return f
	}
	return idealFills{InOrder: fill(idealInOrder), SameRun: fill(idealSameRun), AnyOrder: fill(idealAnyOrder)}
}

// runOf splits a file task's id ("kind-pr-sha-index-rseq", jobs.FileTaskID)
// into its run (the id without the index) and index; an id of another
// shape is a run of its own.
func runOf(task string) (string, int) {
	f := strings.Split(task, "-")
	if len(f) < 3 {
		return task, 0
	}
	i, err := strconv.Atoi(f[len(f)-2])
	if err != nil {
		return task, 0
	}
	return strings.Join(f[:len(f)-2], "-") + "-" + f[len(f)-1], i
}

// expiry is an admitted cost leaving the simulated window.
type expiry struct {
	at   time.Time
	cost int64
}

type expiries []expiry

func (e expiries) Len() int           { return len(e) }
func (e expiries) Less(i, j int) bool { return e[i].at.Before(e[j].at) }
func (e expiries) Swap(i, j int)      { e[i], e[j] = e[j], e[i] }
func (e *expiries) Push(x any)        { *e = append(*e, x.(expiry)) }
func (e *expiries) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// idealAdmissions simulates the admissions: calls in the order of their
// creation (a run's by index), each counted for counts from its
// admission;
// it returns them as a provider ledger and the spans in which calls
// waited (creation to admission).
func idealAdmissions(calls []callRecord, limit int64, counts time.Duration, o idealOrder) ([]fakeopenai.Admission, []span) {
	type ticket struct {
		created time.Time
		run     string
		index   int
		cost    int64
	}
	ts := make([]ticket, 0, len(calls))
	for _, c := range calls {
		run, i := runOf(c.Task)
		ts = append(ts, ticket{created: time.UnixMilli(c.Created), run: run, index: i, cost: c.Tokens})
	}
	sort.SliceStable(ts, func(i, j int) bool {
		if !ts[i].created.Equal(ts[j].created) {
			return ts[i].created.Before(ts[j].created)
		}
		return ts[i].run == ts[j].run && ts[i].index < ts[j].index
	})
	var (
		adm     []fakeopenai.Admission
		waits   []span
		waiting []int // indexes into ts, in order
		out     expiries
		used    int64
		next    int
	)
	admit := func(k int, now time.Time) {
		used += ts[k].cost
		heap.Push(&out, expiry{at: now.Add(counts), cost: ts[k].cost})
		adm = append(adm, fakeopenai.Admission{At: now, Cost: ts[k].cost})
		if now.After(ts[k].created) {
			waits = append(waits, span{ts[k].created, now})
		}
	}
	for next < len(ts) || len(waiting) > 0 {
		// the next event: a call created, or a cost leaving the window
		var now time.Time
		switch {
		case next < len(ts) && (len(out) == 0 || !out[0].at.Before(ts[next].created)):
			now = ts[next].created
		case len(out) > 0:
			now = out[0].at
		default:
			// nothing left the window and nothing comes: the waiting
			// calls can never fit (each costs more than the limit)
			return adm, mergeSpans(waits)
		}
		for next < len(ts) && !ts[next].created.After(now) {
			waiting = append(waiting, next)
			next++
		}
		for len(out) > 0 && !out[0].at.After(now) {
			used -= heap.Pop(&out).(expiry).cost
		}
		kept := waiting[:0]
		head := true // the call in order is still waiting
		mates := 0   // calls of the head's run looked at, the head's included
		var headRun string
		for _, k := range waiting {
			if ts[k].cost > limit {
				continue // can never fit: dropped, as admission rejects it
			}
			fits := ts[k].cost <= limit-used
			if !head && ts[k].run == headRun {
				mates++
			}
			switch {
			case head && fits:
				admit(k, now)
				continue
			case head:
				head, headRun, mates = false, ts[k].run, 1
			case fits && o == idealAnyOrder,
				fits && o == idealSameRun && ts[k].run == headRun && mates <= sameRunDepth:
				admit(k, now)
				continue
			}
			kept = append(kept, k)
		}
		waiting = kept
	}
	return adm, mergeSpans(waits)
}
