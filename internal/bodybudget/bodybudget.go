// Package bodybudget reads request bodies under a budget of bytes held
// at once across all requests, charged as the bytes arrive: a peer that
// declares a large body and sends nothing holds nothing, so idle or slow
// connections cannot starve the requests that do send. The webhook
// receiver and the gateway read their bodies with it.
//
// It owns the accounting and the buffer. It does not own deadlines (the
// caller sets the connection's read deadline) nor what a refusal is
// answered with.
package bodybudget

import (
	"errors"
	"io"
	"sync"
)

// Errors of Read.
var (
	// ErrFull is a body that does not fit in what the budget has left.
	ErrFull = errors.New("bodybudget: too many body bytes in flight")
	// ErrTooLarge is a body over the limit given to Read.
	ErrTooLarge = errors.New("bodybudget: body over its limit")
	// ErrLonger is a body that goes on past its declared length.
	ErrLonger = errors.New("bodybudget: body longer than its Content-Length")
)

// Budget is a counting limit on body bytes held at once.
type Budget struct {
	mu        sync.Mutex
	max, used int64
}

// New returns a budget of max bytes.
func New(max int64) *Budget { return &Budget{max: max} }

// Max is the budget's size.
func (b *Budget) Max() int64 { return b.max }

// Used is the bytes held now.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

func (b *Budget) acquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

func (b *Budget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// minGrow is the first buffer taken once a body's first byte arrived.
const minGrow = 64 << 10

// Read reads a whole body of declared length (negative: unknown, as a
// chunked body) and at most limit bytes, taking from the budget as the
// buffer grows (doubling, at least 64 KiB, never past the declared
// length, which it then fits exactly): nothing is taken before the first
// byte arrives. A declared length over limit is refused before a byte is
// read. release gives the bytes back; call it when the body is no longer
// needed (always safe, and safe more than once). The reader's own errors
// (a deadline, a cut connection) are returned as they are.
func (b *Budget) Read(rd io.Reader, declared, limit int64) (body []byte, release func(), err error) {
	var held int64
	release = func() { b.release(held); held = 0 }
	if declared > limit {
		return nil, release, ErrTooLarge
	}
	// the buffer's bound: the declared length, else the limit and the
	// one byte that shows a body over it
	bound := limit + 1
	if declared >= 0 {
		bound = declared
	}
	var first [1]byte
	if _, err := io.ReadFull(rd, first[:]); err != nil {
		if errors.Is(err, io.EOF) && declared <= 0 {
			return []byte{}, release, nil
		}
		return nil, release, err
	}
	if bound == 0 {
		return nil, release, ErrLonger
	}
	buf := first[:]
	for int64(len(buf)) < bound {
		if len(buf) == cap(buf) {
			size := min(max(2*int64(cap(buf)), minGrow), bound)
			if !b.acquire(size - held) {
				return nil, release, ErrFull
			}
			held = size
			next := make([]byte, len(buf), size)
			copy(next, buf)
			buf = next
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case errors.Is(err, io.EOF) && declared < 0:
			if int64(len(buf)) > limit {
				return nil, release, ErrTooLarge
			}
			return buf, release, nil
		case errors.Is(err, io.EOF) && int64(len(buf)) < bound:
			return nil, release, io.ErrUnexpectedEOF
		case err != nil && !errors.Is(err, io.EOF):
			return nil, release, err
		}
	}
	if declared < 0 {
		return nil, release, ErrTooLarge
	}
	if n, _ := rd.Read(first[:]); n > 0 {
		return nil, release, ErrLonger
	}
	return buf, release, nil
}
