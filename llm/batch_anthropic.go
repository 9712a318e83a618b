package llm

// Anthropic's Message Batches through its SDK (Messages.Batches), as
// Anthropic's "Batch processing" guide and API reference describe them:
//   - POST /v1/messages/batches {requests: [{custom_id, params}]}: params
//     are a Messages request's; at most 100,000 requests or 256 MB; a 429
//     rate_limit_error when the batch would pass the limit of batch
//     requests waiting in the queue. Params are validated asynchronously:
//     a bad one ends as an errored result, not a refused batch;
//   - GET /v1/messages/batches/{id}: processing_status in_progress,
//     canceling or ended; request_counts {processing, succeeded, errored,
//     canceled, expired} (requests count as processing until the whole
//     batch ends); created_at, expires_at (24 hours on), cancel_initiated_at,
//     results_url once ended;
//   - GET .../{id}/results: JSONL, one {"custom_id", "result"} per request,
//     the result {"type": "succeeded", "message"} | {"type": "errored",
//     "error": <an error response>} | {"type": "expired"} | {"type":
//     "canceled"};
//   - POST .../{id}/cancel: canceling; requests already running may
//     finish, the rest end canceled.
// Anthropic has no failed batch: a batch that expired is one that ended
// with expired requests.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"
)

// Anthropic's per-batch limits.
const (
	anthropicBatchRequests = 100000
	anthropicBatchBytes    = 256 << 20
)

// SubmitBatch creates a Message Batch of the items. Each request's params
// are the Messages request Complete sends (anthropicParams), as JSON.
func (a *Anthropic) SubmitBatch(ctx context.Context, items []BatchItem) (Batch, error) {
	if err := checkItems(items, anthropicBatchRequests); err != nil {
		return Batch{}, err
	}
	reqs := make([]anthropic.MessageBatchNewParamsRequest, 0, len(items))
	size := 0
	for _, it := range items {
		p, _, err := anthropicParams(it.Request)
		if err != nil {
			return Batch{}, &Error{Kind: ErrPermanent, Message: fmt.Sprintf("item %s: %v", it.ID, err)}
		}
		raw, err := json.Marshal(p)
		if err != nil {
			return Batch{}, &Error{Kind: ErrPermanent, Message: fmt.Sprintf("item %s: %v", it.ID, err)}
		}
		size += len(raw) + len(it.ID) + 32
		var params anthropic.MessageBatchNewParamsRequestParams
		param.SetJSON(raw, &params) // the synchronous body, not a copy field by field
		reqs = append(reqs, anthropic.MessageBatchNewParamsRequest{CustomID: it.ID, Params: params})
	}
	if size > anthropicBatchBytes {
		return Batch{}, &Error{Kind: ErrPermanent, Message: fmt.Sprintf("a batch holds at most %d bytes, this one about %d", anthropicBatchBytes, size)}
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	var hr *http.Response
	b, err := a.c.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: reqs}, option.WithResponseInto(&hr))
	if err != nil {
		err = classifyAnthropic(err, headerOf(hr))
		var e *Error
		if errors.As(err, &e) && e.Status == http.StatusTooManyRequests {
			// the queue of batch requests waiting for the model is full
			e.Kind = ErrBatchQueueFull
			if s, perr := strconv.Atoi(e.Header.Get("retry-after")); perr == nil && s > 0 {
				e.RetryAfter = time.Duration(s) * time.Second
			}
		}
		return Batch{}, err
	}
	return anthropicBatch(b), nil
}

// Batch reports a batch.
func (a *Anthropic) Batch(ctx context.Context, id string) (Batch, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	var hr *http.Response
	b, err := a.c.Messages.Batches.Get(ctx, id, anthropic.MessageBatchGetParams{}, option.WithResponseInto(&hr))
	if err != nil {
		return Batch{}, classifyAnthropic(err, headerOf(hr))
	}
	return anthropicBatch(b), nil
}

// CancelBatch cancels a batch.
func (a *Anthropic) CancelBatch(ctx context.Context, id string) (Batch, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	var hr *http.Response
	b, err := a.c.Messages.Batches.Cancel(ctx, id, anthropic.MessageBatchCancelParams{}, option.WithResponseInto(&hr))
	if err != nil {
		return Batch{}, classifyAnthropic(err, headerOf(hr))
	}
	return anthropicBatch(b), nil
}

// BatchResults reads an ended batch's results.
func (a *Anthropic) BatchResults(ctx context.Context, id string) ([]BatchResult, error) {
	b, err := a.Batch(ctx, id)
	if err != nil {
		return nil, err
	}
	if !b.State.Over() {
		return nil, stillRunning(b)
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	var hr *http.Response
	stream := a.c.Messages.Batches.ResultsStreaming(ctx, id, anthropic.MessageBatchResultsParams{}, option.WithResponseInto(&hr))
	defer stream.Close()
	var out []BatchResult
	seen := map[string]bool{}
	for stream.Next() {
		line := stream.Current()
		if line.CustomID == "" || seen[line.CustomID] {
			continue
		}
		seen[line.CustomID] = true
		r := BatchResult{ID: line.CustomID}
		switch res := line.Result; res.Type {
		case "succeeded":
			r.Response, r.Err = anthropicReply(res.Message, nil)
		case "errored":
			r.Err = inBatch(erroredResult(res.Error))
		case "expired":
			r.Err = &Error{Kind: ErrBatchExpired, Message: fmt.Sprintf("batch %s expired before the request ran", id)}
		case "canceled":
			r.Err = &Error{Kind: ErrBatchCancelled, Message: fmt.Sprintf("batch %s was cancelled before the request ran", id)}
		default:
			r.Err = &Error{Kind: ErrTransient, Message: fmt.Sprintf("batch result of type %q", res.Type)}
		}
		out = append(out, r)
	}
	if err := stream.Err(); err != nil {
		return nil, classifyAnthropic(err, headerOf(hr))
	}
	return out, nil
}

// anthropicBatch reads a Message Batch. An ended batch is cancelled if
// its cancellation was asked for, expired if requests expired.
func anthropicBatch(b *anthropic.MessageBatch) Batch {
	rc := b.RequestCounts
	out := Batch{ID: b.ID, State: BatchInProgress, Created: b.CreatedAt, Expires: b.ExpiresAt,
		Total: int(rc.Processing + rc.Succeeded + rc.Errored + rc.Canceled + rc.Expired), Done: int(rc.Succeeded), Failed: int(rc.Errored)}
	if b.ProcessingStatus == anthropic.MessageBatchProcessingStatusEnded {
		switch {
		case !b.CancelInitiatedAt.IsZero():
			out.State = BatchCancelled
		case rc.Expired > 0:
			out.State = BatchExpired
		default:
			out.State = BatchEnded
		}
	}
	return out
}

// anthropicReply reads a message as Complete reads its reply: a tool's
// input (prq forces at most one tool), else the text; usage with the
// cache reads and writes.
// TODO(integrator): Complete reads its reply the same way; let it call
// this once the prompt-caching changes to anthropic.go have landed.
func anthropicReply(msg anthropic.Message, h http.Header) (Response, error) {
	var text strings.Builder
	for _, b := range msg.Content {
		switch {
		case b.Type == "tool_use":
			text.Reset()
			text.Write(b.Input)
		case b.Type == "text":
			text.WriteString(b.Text)
		}
	}
	finish := "stop"
	if msg.StopReason == anthropic.StopReasonMaxTokens {
		finish = "length"
	}
	if strings.TrimSpace(text.String()) == "" {
		if finish == "length" {
			return Response{}, &Error{Kind: ErrTransient, Message: "empty content: the output cap was used up", Header: h}
		}
		return Response{}, &Error{Kind: ErrTransient, Message: "empty content", Header: h}
	}
	u := msg.Usage
	return Response{Text: text.String(), FinishReason: finish,
		PromptTokens: u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens, OutputTokens: u.OutputTokens,
		CachedTokens: u.CacheReadInputTokens, CacheWriteTokens: u.CacheCreationInputTokens, Header: h}, nil
}

// errorStatus is the HTTP status of each of Anthropic's error types (its
// "Errors" reference): an errored batch result carries the type only.
var errorStatus = map[string]int{
	"invalid_request_error": 400, "authentication_error": 401, "billing_error": 402, "permission_error": 403,
	"not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429, "api_error": 500,
	"timeout_error": 504, "overloaded_error": 529,
}

// erroredResult classifies an errored result's error as the synchronous
// call's failure of the same type and message is classified.
func erroredResult(e anthropic.ErrorResponse) error {
	status, ok := errorStatus[e.Error.Type]
	if !ok {
		status = http.StatusInternalServerError
	}
	raw := e.RawJSON()
	if raw == "" {
		b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": e.Error.Type, "message": e.Error.Message}})
		raw = string(b)
	}
	ae := &anthropic.Error{StatusCode: status}
	if err := ae.UnmarshalJSON([]byte(raw)); err != nil {
		return &Error{Kind: ErrTransient, Message: "errored result: " + err.Error()}
	}
	return classifyAnthropic(ae, nil)
}

func headerOf(r *http.Response) http.Header {
	if r == nil {
		return nil
	}
	return r.Header
}
