package bodybudget_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/prq-dev/prq/internal/bodybudget"
)

// stalled yields its bytes, then blocks until released: a peer that sent
// part of its body and stopped.
type stalled struct {
	data    []byte
	reached chan struct{}
	release chan struct{}
}

func (s *stalled) Read(p []byte) (int, error) {
	if len(s.data) == 0 {
		close(s.reached)
		<-s.release
		return 0, io.ErrUnexpectedEOF
	}
	n := copy(p, s.data)
	s.data = s.data[n:]
	return n, nil
}

func TestReadChargesArrivedBytes(t *testing.T) {
	b := bodybudget.New(1 << 20)
	// a peer that declared 900 KiB and sent nothing holds nothing
	idle := &stalled{reached: make(chan struct{}), release: make(chan struct{})}
	done := make(chan error)
	go func() {
		_, release, err := b.Read(idle, 900<<10, 1<<20)
		release()
		done <- err
	}()
	<-idle.reached
	if u := b.Used(); u != 0 {
		t.Fatalf("an idle peer that declared 900 KiB holds %d bytes, want 0", u)
	}
	body, release, err := b.Read(bytes.NewReader(make([]byte, 900<<10)), 900<<10, 1<<20)
	if err != nil || len(body) != 900<<10 || cap(body) != 900<<10 {
		t.Fatalf("a body beside the idle peer: %d bytes (cap %d), %v", len(body), cap(body), err)
	}
	if u := b.Used(); u != 900<<10 {
		t.Fatalf("a 900 KiB body holds %d bytes, want exactly 900 KiB", u)
	}
	// a second one does not fit while the first is held
	if _, rel, err := b.Read(bytes.NewReader(make([]byte, 900<<10)), 900<<10, 1<<20); !errors.Is(err, bodybudget.ErrFull) {
		t.Fatalf("over the budget: %v, want ErrFull", err)
	} else {
		rel()
	}
	release()
	release() // twice is safe
	close(idle.release)
	if err := <-done; err == nil {
		t.Fatal("the stalled body read without error")
	}
	if u := b.Used(); u != 0 {
		t.Fatalf("%d bytes held after every body was released", u)
	}
}

func TestReadRefusals(t *testing.T) {
	b := bodybudget.New(1 << 20)
	for _, tc := range []struct {
		name     string
		body     string
		declared int64
		want     error
	}{
		{"declared over the limit", "", 11, bodybudget.ErrTooLarge},
		{"chunked over the limit", strings.Repeat("x", 11), -1, bodybudget.ErrTooLarge},
		{"longer than declared", "abcdef", 3, bodybudget.ErrLonger},
		{"shorter than declared", "abc", 5, io.ErrUnexpectedEOF},
		{"declared empty, bytes sent", "a", 0, bodybudget.ErrLonger},
		{"chunked at the limit", strings.Repeat("x", 10), -1, nil},
		{"empty", "", -1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, release, err := b.Read(strings.NewReader(tc.body), tc.declared, 10)
			release()
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if err == nil && string(body) != tc.body {
				t.Fatalf("body %q, want %q", body, tc.body)
			}
		})
	}
	if u := b.Used(); u != 0 {
		t.Fatalf("%d bytes held after every read was released", u)
	}
}
