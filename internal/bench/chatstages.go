package bench

import (
	"sort"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/quantile"
)

// Where a chat's wait goes, stage by stage, from the webhook's answer to
// the reply on GitHub. A strategy without admission (a baseline) has no
// admission time: its gate is in the handler, so its wait for room shows
// in "prepare" and its refill stage is what the provider's bucket would
// have made it wait.
var chatStageNames = []string{
	"job",      // the webhook's answer to the chat job's creation (its ticket)
	"refill",   // creation to admission: what the provider's bucket, as it stood at the creation, took to accrue the chat's tokens
	"admit",    // creation to admission, the rest: the order (batch taking the room first), the loop's wake-up
	"dispatch", // admission to the handler's start: the release, asynq's pick-up
	"prepare",  // the handler's start to its call: reads, the prompt (a baseline's gate)
	"call",     // the call to its reply
	"reply",    // the call's reply to the comment on GitHub: the write pacer, GitHub
}

// chatStage is one stage's quantiles over the answered chats, in
// uncompressed seconds.
type chatStage struct {
	Stage string  `json:"stage"`
	P50   float64 `json:"p50_s"`
	P99   float64 `json:"p99_s"`
	// Slowest is the stage's time in the chat with the longest wait.
	Slowest float64 `json:"slowest_s"`
}

// chatTrace is one answered chat's times (unix ms): the webhook's answer,
// the reply on GitHub, and its last call's record.
type chatTrace struct {
	sent, reply int64
	call        callRecord
}

// chatStagesOf splits the chats' waits into stages. adm is the chat
// model's provider ledger, replayed as a bucket of burst refilled at
// limit per period for the refill stage; compress scales to uncompressed
// seconds.
func chatStagesOf(traces []chatTrace, adm []fakeopenai.Admission, limit int64, period time.Duration, burst int64, compress float64) []chatStage {
	if len(traces) == 0 {
		return nil
	}
	if burst <= 0 {
		burst = limit
	}
	a := append([]fakeopenai.Admission(nil), adm...)
	sort.Slice(a, func(i, j int) bool { return a[i].At.Before(a[j].At) })
	per := make([][]float64, len(chatStageNames))
	slowest, worst := 0, int64(-1)
	for i, t := range traces {
		st := chatTraceStages(t, a, limit, period, burst)
		for k, ms := range st {
			per[k] = append(per[k], float64(ms)/1000*compress)
		}
		if w := t.reply - t.sent; w > worst {
			slowest, worst = i, w
		}
	}
	out := make([]chatStage, len(chatStageNames))
	for k, name := range chatStageNames {
		out[k] = chatStage{Stage: name, P50: quantile.Of(per[k], .5), P99: quantile.Of(per[k], .99), Slowest: per[k][slowest]}
	}
	return out
}

// chatTraceStages is one chat's stages in ms, in chatStageNames' order;
// each is at least 0.
func chatTraceStages(t chatTrace, a []fakeopenai.Admission, limit int64, period time.Duration, burst int64) []int64 {
	c := t.call
	created := max(c.Created, t.sent)
	admitted := c.Admitted
	if admitted == 0 { // no admission: the gate is in the handler
		admitted = max(c.Start, created)
	}
	refill := min(refillWait(a, limit, period, burst, time.UnixMilli(created), c.Tokens).Milliseconds(), max(admitted-created, 0))
	return []int64{
		max(created-t.sent, 0),
		refill,
		max(admitted-created-refill, 0),
		max(c.Start-admitted, 0),
		max(c.At-max(c.Start, admitted), 0),
		max(c.Done-c.At, 0),
		max(t.reply-c.Done, 0),
	}
}

// refillWait is how long a bucket replaying the ledger a up to at would
// take from at to hold cost.
func refillWait(a []fakeopenai.Admission, limit int64, period time.Duration, burst int64, at time.Time, cost int64) time.Duration {
	if limit <= 0 || period <= 0 {
		return 0
	}
	rate := float64(limit) / float64(period.Microseconds()) // tokens per µs
	level, last := float64(burst), time.Time{}
	for _, x := range a {
		if !x.At.Before(at) {
			break
		}
		if !last.IsZero() {
			level = min(level+rate*float64(x.At.Sub(last).Microseconds()), float64(burst))
		}
		level -= float64(x.Cost)
		last = x.At
	}
	if !last.IsZero() {
		level = min(level+rate*float64(at.Sub(last).Microseconds()), float64(burst))
	}
	if need := float64(cost) - level; need > 0 {
		return time.Duration(need/rate) * time.Microsecond
	}
	return 0
}
