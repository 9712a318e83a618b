package admission

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"

	"github.com/prq-dev/prq/ratelimit"
)

// CallTrace follows one call to the provider through the HTTP client:
// when its request was written and when the reply's first byte came.
type CallTrace struct {
	mu    sync.Mutex
	wrote time.Time
	first time.Time
}

// TraceCall returns ctx with an HTTP client trace of the call made with
// it. start is taken before the call's Calling; sent, if not nil, is
// called once, in its own goroutine, with the time from start to the
// request's first successful write (a client that retries writes again),
// as it happens, long before the reply: the caller passes it to
// Scheduler.Sent.
func TraceCall(ctx context.Context, start time.Time, sent func(after time.Duration)) (context.Context, *CallTrace) {
	t := &CallTrace{}
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err != nil {
				return
			}
			now := time.Now()
			t.mu.Lock()
			first := t.wrote.IsZero()
			if first {
				t.wrote = now
			}
			t.mu.Unlock()
			if first && sent != nil {
				go sent(now.Sub(start))
			}
		},
		GotFirstResponseByte: func() {
			now := time.Now()
			t.mu.Lock()
			if t.first.IsZero() {
				t.first = now
			}
			t.mu.Unlock()
		},
	}), t
}

// Wrote reports whether the request was written out (the provider may
// have seen it).
func (t *CallTrace) Wrote() bool { return !t.WroteAt().IsZero() }

// WroteAt is when the request was first written out (zero: not yet).
func (t *CallTrace) WroteAt() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.wrote
}

// Arrival returns the latest the provider may have counted the call (h:
// the reply's headers): the reply's first byte, less the time the
// provider says it processed the call when the reply allows it (as Way).
// False when the trace saw no reply.
func (t *CallTrace) Arrival(h http.Header) (time.Time, bool) {
	t.mu.Lock()
	wrote, first := t.wrote, t.first
	t.mu.Unlock()
	if first.IsZero() {
		return time.Time{}, false
	}
	if way, ok := t.Way(h); ok {
		return wrote.Add(way), true
	}
	return first, true
}

// Way returns a bound on the time the request took from its write to the
// provider: the time to the reply's first byte less the time the
// provider says it processed the call (h: the reply's headers; see
// ratelimit.ProcessingTime). False when the reply says nothing of its
// processing, or more of it than the reply took, or the trace saw no
// write or no reply.
func (t *CallTrace) Way(h http.Header) (time.Duration, bool) {
	proc, ok := ratelimit.ProcessingTime(h)
	if !ok {
		return 0, false
	}
	t.mu.Lock()
	wrote, first := t.wrote, t.first
	t.mu.Unlock()
	// a provider that says it processed the call longer than the reply
	// took says nothing we can use
	if wrote.IsZero() || first.IsZero() || first.Sub(wrote) < proc {
		return 0, false
	}
	return first.Sub(wrote) - proc, true
}
