package ratelimit

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MinWindowMargin is the least margin a measured way gives: the
// provider's clock and its rounding (openai-processing-ms is whole
// milliseconds), and a count the provider takes shortly after a call
// arrives. A call whose reply bounded its way is held that much past it
// too (admission.Scheduler.Arrived).
const MinWindowMargin = 5 * time.Millisecond

// wayMeter keeps the longest way to the provider measured in this
// process over the current and the previous window (Bucket.ObserveWay).
type wayMeter struct {
	mu        sync.Mutex
	epoch     int64 // index of the current window span
	cur, prev time.Duration
	seen      bool
	// unknownUntil: a call's charge could not be moved to its write
	// (WayUnknown); the default margin holds until then
	unknownUntil time.Time
}

func (m *wayMeter) observe(now time.Time, span, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rotate(now, span)
	m.cur = max(m.cur, d)
	m.seen = true
}

// longest returns the longest way of the current and the previous
// window span; false when none was measured in them.
func (m *wayMeter) longest(now time.Time, span time.Duration) (time.Duration, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rotate(now, span)
	if !m.seen || (m.cur == 0 && m.prev == 0) {
		return 0, false
	}
	return max(m.cur, m.prev), true
}

// unknown reports whether a charge could not be moved lately (WayUnknown).
func (m *wayMeter) unknown(now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return now.Before(m.unknownUntil)
}

func (m *wayMeter) rotate(now time.Time, span time.Duration) {
	e := now.UnixMicro() / max(span.Microseconds(), 1)
	switch {
	case e == m.epoch:
	case e == m.epoch+1:
		m.prev, m.cur = m.cur, 0
	default:
		m.prev, m.cur = 0, 0
	}
	m.epoch = e
}

// ObserveWay records one call's way to the provider as measured by its
// caller: from the moment its request was written to the moment the
// reply's first byte came, less the time the provider says it processed
// the call (ProcessingTime), a bound on the time the request took to
// reach the provider. A window limiter whose WindowMargin is not set
// holds each admission twice the longest way measured over the last two
// windows longer than the window (at least 5 ms, at most the default
// margin, Window/60; the default until a way is measured), so the margin
// follows the network instead of a guess; and it holds at least the
// longest margin any process measured over the last two windows (kept in
// the window's state in Redis). A margin set in the limits stays as set.
// Every Bucket of the model's keys shares the process's measure.
func (b *Bucket) ObserveWay(d time.Duration) {
	if b.way == nil || d < 0 || !b.limits.Windowed() {
		return
	}
	b.way.observe(b.wallNow(), b.limits.Window, d)
}

// WayUnknown records that a call's charge could not be moved to its
// call or its write (Redis failed): the margin must cover the whole way
// from where the charge stayed, so this process holds the default
// margin, Window/60, for the next two windows (what the charge may
// still count in), measured or not, and so does every process whose
// margin is measured (the longest measured margin is shared).
func (b *Bucket) WayUnknown() {
	if b.way == nil || !b.limits.Windowed() {
		return
	}
	b.way.mu.Lock()
	b.way.unknownUntil = b.wallNow().Add(2 * b.limits.Window)
	b.way.mu.Unlock()
}

// WindowMargin returns the margin a window limiter holds each admission
// longer than its window now: the one set in the limits, else the one
// measured (see ObserveWay). 0 for a token bucket.
func (b *Bucket) WindowMargin() time.Duration {
	m, _ := b.margin()
	return m
}

// margin is WindowMargin, and whether it was measured (a measured margin
// is shared through the window's state: every measured process holds the
// longest any of them measured over the last two windows).
func (b *Bucket) margin() (time.Duration, bool) {
	l := b.limits
	if !l.Windowed() {
		return 0, false
	}
	if !l.marginMeasured || b.way == nil {
		return l.WindowMargin, false
	}
	now := b.wallNow()
	if b.way.unknown(now) {
		// shared: the charge that stayed may count in any process's window
		return l.WindowMargin, true
	}
	way, ok := b.way.longest(now, l.Window)
	if !ok {
		return l.WindowMargin, false
	}
	return min(max(2*way, MinWindowMargin), l.WindowMargin), true
}

func (b *Bucket) wallNow() time.Time {
	if b.NowFunc != nil {
		return b.NowFunc()
	}
	return time.Now()
}

// ProcessingTime returns the time the provider says it spent on a call
// (OpenAI's and Azure OpenAI's openai-processing-ms header, whole or
// decimal milliseconds); false when the reply has none or it is not a
// number of milliseconds below a day.
func ProcessingTime(h http.Header) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("openai-processing-ms"))
	if v == "" {
		return 0, false
	}
	ms, err := strconv.ParseFloat(v, 64)
	if err != nil || !(ms >= 0 && ms < float64(24*time.Hour/time.Millisecond)) {
		return 0, false
	}
	return time.Duration(ms * float64(time.Millisecond)), true
}
