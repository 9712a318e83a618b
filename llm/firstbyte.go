package llm

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptrace"
	"time"
)

// A provider that takes a call and never answers holds it for the whole
// call timeout. The first-byte limit (Request.FirstByte) notices sooner:
// when no byte of the reply (its headers) has arrived within it, the call
// is abandoned as a transient failure, which the workers retry through
// admission. A reply that has begun is bounded by the call timeout alone.

// CodeFirstByte is the Code of a call abandoned for want of a first byte.
const CodeFirstByte = "first_byte_timeout"

// firstByteError is the cause of a call abandoned for want of a first byte.
type firstByteError struct{ limit time.Duration }

func (e *firstByteError) Error() string {
	return fmt.Sprintf("no reply from the provider within the first-byte limit (%s): call abandoned", e.limit)
}

// withFirstByte returns ctx cancelled (cause *firstByteError) when no
// response byte arrived within limit; 0 sets no limit. stop releases it.
func withFirstByte(ctx context.Context, limit time.Duration) (_ context.Context, stop func()) {
	if limit <= 0 {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	t := time.AfterFunc(limit, func() { cancel(&firstByteError{limit: limit}) })
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotFirstResponseByte: func() { t.Stop() }})
	return ctx, func() { t.Stop(); cancel(nil) }
}

// noFirstByte returns the transient failure of a call that failed (err)
// because ctx abandoned it for want of a first byte, else nil.
func noFirstByte(ctx context.Context, err error) error {
	var fb *firstByteError
	if err != nil && errors.As(context.Cause(ctx), &fb) {
		return &Error{Kind: ErrTransient, Code: CodeFirstByte, Message: fb.Error()}
	}
	return nil
}
