package ghapp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// The client's deadline bounds a call that never answers, and leaves a
// call that answers readable to its end.
func TestDeadlineBoundsACall(t *testing.T) {
	stall := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stall" {
			select {
			case <-stall:
			case <-r.Context().Done():
			}
			return
		}
		io.WriteString(w, "hello")
	}))
	tr := &http.Transport{}
	defer func() { close(stall); srv.Close(); tr.CloseIdleConnections() }()
	c := &http.Client{Transport: deadline{next: tr, d: 100 * time.Millisecond}}
	if _, err := c.Get(srv.URL + "/stall"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call that never answers: %v, want the deadline exceeded", err)
	}
	resp, err := c.Get(srv.URL + "/ok")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil || string(b) != "hello" {
		t.Fatalf("body %q, %v", b, err)
	}
	resp.Body.Close()
}
