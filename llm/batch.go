package llm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// The providers' batch APIs (OpenAI's Batch API, Azure OpenAI's global
// batch deployments, Anthropic's Message Batches): many requests sent as
// one batch, answered within 24 hours at half the price, limited apart
// from the synchronous RPM and TPM. A Batcher submits, polls, reads and
// cancels batches; it keeps no state between calls (a batch is known by
// its ID alone), so the caller may poll from another process. Scheduling
// batches, mapping results back to jobs and settling their cost are the
// caller's.

// BatchItem is one request of a batch. ID is its custom_id: unique in
// the batch, 1 to 64 letters, digits, '_' or '-' (the rule Anthropic
// documents; OpenAI's is no looser in practice). CustomID makes one of
// any string.
type BatchItem struct {
	ID      string
	Request Request
}

// BatchState is where a batch is in its life.
type BatchState string

const (
	// BatchInProgress: validating, in progress, finalizing, or being
	// cancelled (OpenAI's cancelling, Anthropic's canceling).
	BatchInProgress BatchState = "in_progress"
	// BatchEnded: every request has its result (OpenAI's completed,
	// Anthropic's ended).
	BatchEnded BatchState = "ended"
	// BatchExpired: the completion window closed first; the requests
	// that had not run are ErrBatchExpired.
	BatchExpired BatchState = "expired"
	// BatchFailed: the batch as a whole was refused after it was
	// created (OpenAI's validation): Batch.Err says why.
	BatchFailed BatchState = "failed"
	// BatchCancelled: cancelled; the requests that had not run are
	// ErrBatchCancelled.
	BatchCancelled BatchState = "cancelled"
)

// Over reports whether the batch has stopped: its results can be read.
func (s BatchState) Over() bool { return s != BatchInProgress }

// Batch is a batch as the provider reports it.
type Batch struct {
	ID    string
	State BatchState
	// Created is when the provider accepted it, Expires when its
	// completion window closes (zero when the provider does not say).
	Created, Expires time.Time
	// Total requests; Done of them answered, Failed of them answered
	// with an error. The rest are running, or expired or cancelled.
	// (Anthropic counts a request only once the whole batch has ended.)
	Total, Done, Failed int
	// Err is why a BatchFailed batch failed: a classified *Error,
	// ErrBatchQueueFull when the provider's queue for the model was
	// full, ErrPermanent for a file the provider would not take.
	Err error
}

// BatchResult is one request's outcome: a Response read as the
// synchronous call's reply is, or Err, a classified *Error:
// ErrTransient, ErrPermanent, ErrContextLength, ErrAccount, or
// ErrBatchExpired / ErrBatchCancelled for a request the batch never ran.
type BatchResult struct {
	ID       string
	Response Response
	Err      error
}

// Batcher sends batches to one provider with one key: *Client (OpenAI,
// Azure OpenAI) and *Anthropic.
type Batcher interface {
	// SubmitBatch creates a batch of the items. Items it cannot send
	// (no items, a bad or repeated ID, an OpenAI batch of several
	// models, too many or too large) are ErrPermanent before any call;
	// a provider whose batch queue is full is ErrBatchQueueFull, now
	// (Anthropic's 429) or later as a BatchFailed batch (OpenAI's
	// token_limit_exceeded).
	SubmitBatch(ctx context.Context, items []BatchItem) (Batch, error)
	// Batch reports a batch's state.
	Batch(ctx context.Context, id string) (Batch, error)
	// BatchResults returns the results of a batch whose state is Over,
	// one per submitted item, each ID once, in no set order; a batch
	// still in progress is ErrTransient. (OpenAI's reads the batch's
	// input file for requests its output files do not list: the file
	// is kept.)
	BatchResults(ctx context.Context, id string) ([]BatchResult, error)
	// CancelBatch asks the provider to stop a batch: requests already
	// running may still finish, the rest end ErrBatchCancelled. It
	// returns the batch as it stands (usually still in progress).
	CancelBatch(ctx context.Context, id string) (Batch, error)
}

var (
	_ Batcher = (*Client)(nil)
	_ Batcher = (*Anthropic)(nil)
)

// Kinds of batch failure.
var (
	// ErrBatchQueueFull: the provider's queue of batch work for the
	// model is full (OpenAI's enqueued-token limit, Anthropic's limit of
	// batch requests waiting): submit again when an earlier batch ends.
	// Not a rate limit of the synchronous API.
	ErrBatchQueueFull = errors.New("llm: batch queue full")
	// ErrBatchExpired: the batch expired before this request ran; it
	// was not billed. Send it again.
	ErrBatchExpired = errors.New("llm: batch request expired")
	// ErrBatchCancelled: the batch was cancelled before this request
	// ran; it was not billed.
	ErrBatchCancelled = errors.New("llm: batch request cancelled")
)

// customIDPattern is Anthropic's custom_id rule.
var customIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// CustomID returns a valid batch item ID for s, the same for the same
// s: s itself when it is one, else its letters, digits, '_' and '-'
// (others become '_') cut to 47 bytes, '-', and 16 hex digits of its
// SHA-256, so that IDs that differ stay apart.
func CustomID(s string) string {
	if customIDPattern.MatchString(s) {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if !(c == '-' || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
			b[i] = '_'
		}
	}
	sum := sha256.Sum256([]byte(s))
	return string(b[:min(len(b), 47)]) + "-" + hex.EncodeToString(sum[:8])
}

// checkItems refuses a batch the provider would refuse: none, more than
// limit, or an ID that is not a custom_id or is repeated.
func checkItems(items []BatchItem, limit int) error {
	if len(items) == 0 {
		return &Error{Kind: ErrPermanent, Message: "a batch needs at least one item"}
	}
	if len(items) > limit {
		return &Error{Kind: ErrPermanent, Message: fmt.Sprintf("a batch holds at most %d requests, got %d", limit, len(items))}
	}
	seen := make(map[string]bool, len(items))
	for i, it := range items {
		if !customIDPattern.MatchString(it.ID) {
			return &Error{Kind: ErrPermanent, Message: fmt.Sprintf("item %d: ID %q is not a custom_id (1 to 64 of a-z, A-Z, 0-9, _ and -): use CustomID", i, it.ID)}
		}
		if seen[it.ID] {
			return &Error{Kind: ErrPermanent, Message: fmt.Sprintf("item %d: ID %q is repeated", i, it.ID)}
		}
		seen[it.ID] = true
	}
	return nil
}

// notRun is the outcome of a request a batch that is over never
// answered: expired or cancelled as the batch was, the batch's own
// failure, or (a batch that ended without it) a transient failure.
func notRun(b Batch) error {
	switch b.State {
	case BatchExpired:
		return &Error{Kind: ErrBatchExpired, Message: fmt.Sprintf("batch %s expired before the request ran", b.ID)}
	case BatchCancelled:
		return &Error{Kind: ErrBatchCancelled, Message: fmt.Sprintf("batch %s was cancelled before the request ran", b.ID)}
	case BatchFailed:
		if b.Err != nil {
			return b.Err
		}
	}
	return &Error{Kind: ErrTransient, Message: fmt.Sprintf("batch %s is %s and reports no result for the request", b.ID, b.State)}
}

// inBatch adjusts a request's classified failure for a batch: a rate
// limit inside a batch is not admission's to wait for (the request was
// never admitted), so it is transient: submit it again.
func inBatch(err error) error {
	var e *Error
	if errors.As(err, &e) && errors.Is(e.Kind, ErrRateLimited) {
		e.Kind = ErrTransient
	}
	return err
}

// stillRunning is BatchResults' answer for a batch not yet over.
func stillRunning(b Batch) error {
	return &Error{Kind: ErrTransient, Message: fmt.Sprintf("batch %s is %s: no results until it is over", b.ID, b.State)}
}
