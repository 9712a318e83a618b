package admission_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prq-dev/prq/admission"
)

// TestCallTraceWay: the way a traced call's reply bounds is the time from
// its write to the reply's first byte less the processing the provider
// reports; a reply that reports none, or more than the reply took, bounds
// nothing.
func TestCallTraceWay(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(30 * time.Millisecond)
		if p := r.URL.Query().Get("processing"); p != "" {
			w.Header().Set("openai-processing-ms", p)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	call := func(processing string) (time.Duration, bool, time.Duration) {
		t.Helper()
		var after time.Duration
		done := make(chan struct{})
		start := time.Now()
		ctx, trace := admission.TraceCall(context.Background(), start, func(a time.Duration) { after = a; close(done) })
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"?processing="+processing, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		took := time.Since(start)
		<-done
		if !trace.Wrote() || after <= 0 || after > took {
			t.Fatalf("the write: wrote %v, %s after the start (the call took %s)", trace.Wrote(), after, took)
		}
		way, ok := trace.Way(resp.Header)
		// the latest the provider counted it: the write plus the way,
		// else the reply's first byte (after the provider's 30 ms)
		at, aok := trace.Arrival(resp.Header)
		switch {
		case !aok || at.After(start.Add(took)):
			t.Fatalf("arrival %v, %v: after the call returned (%s)", at.Sub(start), aok, took)
		case ok && at.Sub(start) > took-25*time.Millisecond:
			t.Fatalf("arrival %s after the start, past the reply less its processing (%s)", at.Sub(start), took-25*time.Millisecond)
		case !ok && at.Sub(start) < 30*time.Millisecond:
			t.Fatalf("arrival %s after the start, before the reply's first byte", at.Sub(start))
		}
		return way, ok, took
	}
	// the provider held it 30 ms and says 25: the way is the rest, at
	// least 5 ms, at most the whole call less 25 ms
	way, ok, took := call("25")
	if !ok || way < 5*time.Millisecond || way > took-25*time.Millisecond {
		t.Fatalf("way %s, %v; want between 5 ms and %s", way, ok, took-25*time.Millisecond)
	}
	// decimal milliseconds (Azure) too
	if way, ok, took := call("25.5"); !ok || way < 4*time.Millisecond || way > took-25*time.Millisecond {
		t.Fatalf("way with decimal processing %s, %v", way, ok)
	}
	// no processing reported: nothing bounded
	if way, ok, _ := call(""); ok {
		t.Fatalf("way %s with no processing time reported; want none", way)
	}
	// more processing than the reply took: a header we cannot use
	if way, ok, _ := call("5000"); ok {
		t.Fatalf("way %s with 5 s of processing reported for a 30 ms reply; want none", way)
	}
}
