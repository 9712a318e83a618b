package llm

// OpenAI's Batch API through go-openai, as OpenAI's "Batch API" guide and
// API reference describe it:
//   - the requests go as a JSONL file uploaded with purpose "batch" (POST
//     /v1/files, multipart), one line per request: {"custom_id", "method":
//     "POST", "url": "/v1/chat/completions", "body": <the chat completion>};
//     at most 50,000 lines and 200 MB, one model per file;
//   - POST /v1/batches {input_file_id, endpoint, completion_window: "24h"}
//     creates the batch; GET /v1/batches/{id} reports its status
//     (validating, failed, in_progress, finalizing, completed, expired,
//     cancelling, cancelled), request_counts {total, completed, failed},
//     errors.data[] {code, message, param, line} when validation failed
//     (token_limit_exceeded: the model's enqueued-token limit), and when
//     it is over output_file_id and error_file_id;
//   - each line of those files is {"id", "custom_id", "response":
//     {"status_code", "request_id", "body"}, "error"}: a request answered
//     has its response (the error file holds the non-200 ones, their body
//     the API's error object); one the batch never ran has response null
//     and error {code, message}: batch_expired for an expired batch;
//   - POST /v1/batches/{id}/cancel: cancelling, then cancelled with what
//     had finished.
// Azure OpenAI serves the same API under /openai/files and
// /openai/batches?api-version= (go-openai's Azure configuration builds
// those URLs), its lines' url "/chat/completions" and model the global
// batch deployment's name.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// OpenAI's per-batch limits.
const (
	openaiBatchRequests = 50000
	openaiBatchBytes    = 200 << 20
)

// batchLine is one request line of a batch input file.
type batchLine struct {
	CustomID string          `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

// batchEndpoint is the url of the batch's lines and its endpoint.
func (c *Client) batchEndpoint() string {
	if c.deployment != nil {
		return "/chat/completions" // Azure's
	}
	return string(openai.BatchEndpointChatCompletions)
}

// SubmitBatch uploads the items as a batch input file and creates the
// batch. Each line's body is the chat completion Complete sends for its
// request (prompt_cache_key included).
func (c *Client) SubmitBatch(ctx context.Context, items []BatchItem) (Batch, error) {
	if err := checkItems(items, openaiBatchRequests); err != nil {
		return Batch{}, err
	}
	var file bytes.Buffer
	endpoint := c.batchEndpoint()
	for i, it := range items {
		if it.Request.Model != items[0].Request.Model {
			return Batch{}, &Error{Kind: ErrPermanent, Message: fmt.Sprintf("item %d: model %q in a batch of %q: an OpenAI batch holds one model's requests", i, it.Request.Model, items[0].Request.Model)}
		}
		req := chatRequest(it.Request)
		if err := openai.NewReasoningValidator().Validate(req); err != nil {
			return Batch{}, &Error{Kind: ErrPermanent, Message: fmt.Sprintf("item %s: %v", it.ID, err)}
		}
		if c.deployment != nil {
			req.Model = c.deployment(req.Model)
		}
		body, err := json.Marshal(req)
		if err != nil {
			return Batch{}, &Error{Kind: ErrPermanent, Message: fmt.Sprintf("item %s: %v", it.ID, err)}
		}
		if it.Request.CacheKey != "" {
			body = withMember(body, "prompt_cache_key", it.Request.CacheKey)
		}
		line, err := json.Marshal(batchLine{CustomID: it.ID, Method: http.MethodPost, URL: endpoint, Body: body})
		if err != nil {
			return Batch{}, &Error{Kind: ErrPermanent, Message: fmt.Sprintf("item %s: %v", it.ID, err)}
		}
		file.Write(line)
		file.WriteByte('\n')
	}
	if file.Len() > openaiBatchBytes {
		return Batch{}, &Error{Kind: ErrPermanent, Message: fmt.Sprintf("a batch file holds at most %d bytes, this one %d", openaiBatchBytes, file.Len())}
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	f, err := c.c.CreateFileBytes(ctx, openai.FileBytesRequest{Name: "prq-batch.jsonl", Bytes: file.Bytes(), Purpose: openai.PurposeBatch})
	if err != nil {
		return Batch{}, classify(err, f.Header())
	}
	b, err := c.c.CreateBatch(ctx, openai.CreateBatchRequest{InputFileID: f.ID, Endpoint: openai.BatchEndpoint(endpoint), CompletionWindow: "24h"})
	if err != nil {
		err = classify(err, b.Header())
		var e *Error
		if derr := c.c.DeleteFile(ctx, f.ID); derr != nil && errors.As(err, &e) {
			e.Message += fmt.Sprintf(" (and deleting its input file %s: %v)", f.ID, derr)
		}
		return Batch{}, err
	}
	return openaiBatch(b.Batch), nil
}

// Batch reports a batch.
func (c *Client) Batch(ctx context.Context, id string) (Batch, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	b, err := c.c.RetrieveBatch(ctx, id)
	if err != nil {
		return Batch{}, classify(err, b.Header())
	}
	return openaiBatch(b.Batch), nil
}

// CancelBatch cancels a batch.
func (c *Client) CancelBatch(ctx context.Context, id string) (Batch, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	b, err := c.c.CancelBatch(ctx, id)
	if err != nil {
		return Batch{}, classify(err, b.Header())
	}
	return openaiBatch(b.Batch), nil
}

// BatchResults reads the batch's output and error files. When they do
// not account for every request (a batch that failed validation has
// neither; a cancelled one may not list what it never ran), it reads the
// input file for the rest, which are then what the batch's state makes
// them (notRun).
func (c *Client) BatchResults(ctx context.Context, id string) ([]BatchResult, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	raw, err := c.c.RetrieveBatch(ctx, id)
	if err != nil {
		return nil, classify(err, raw.Header())
	}
	b := openaiBatch(raw.Batch)
	if !b.State.Over() {
		return nil, stillRunning(b)
	}
	got := map[string]int{} // custom_id: index in out
	var out []BatchResult
	for _, file := range []*string{raw.OutputFileID, raw.ErrorFileID} {
		if file == nil || *file == "" {
			continue
		}
		err := c.eachLine(ctx, *file, func(line []byte) {
			r, ok := outputResult(line)
			if _, seen := got[r.ID]; ok && !seen {
				got[r.ID] = len(out)
				out = append(out, r)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	if b.Total > 0 && len(out) >= b.Total {
		return out, nil
	}
	var all []BatchResult
	err = c.eachLine(ctx, raw.InputFileID, func(line []byte) {
		var in batchLine
		if json.Unmarshal(line, &in) != nil || in.CustomID == "" {
			return
		}
		i, ok := got[in.CustomID]
		switch {
		case ok && i < 0: // repeated in the input
		case ok:
			all = append(all, out[i])
			got[in.CustomID] = -1
		default:
			all = append(all, BatchResult{ID: in.CustomID, Err: notRun(b)})
			got[in.CustomID] = -1
		}
	})
	if err != nil {
		return nil, err
	}
	return all, nil
}

// eachLine calls fn with each non-empty line of a file's content.
func (c *Client) eachLine(ctx context.Context, fileID string, fn func(line []byte)) error {
	content, err := c.c.GetFileContent(ctx, fileID)
	if err != nil {
		return classify(err, content.Header())
	}
	defer content.Close()
	r := bufio.NewReader(content)
	for {
		line, err := r.ReadBytes('\n')
		if line = bytes.TrimSpace(line); len(line) > 0 {
			fn(line)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return &Error{Kind: ErrTransient, Message: fmt.Sprintf("reading file %s: %v", fileID, err)}
		}
	}
}

// outputLine is a line of a batch's output or error file.
type outputLine struct {
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// outputResult reads one output or error line as the synchronous call
// reads its reply or its failure; ok is false for a line without a
// custom_id.
func outputResult(line []byte) (BatchResult, bool) {
	var o outputLine
	if json.Unmarshal(line, &o) != nil || o.CustomID == "" {
		return BatchResult{}, false
	}
	r := BatchResult{ID: o.CustomID}
	switch {
	case o.Response != nil && o.Response.StatusCode == http.StatusOK:
		var resp openai.ChatCompletionResponse
		if err := json.Unmarshal(o.Response.Body, &resp); err != nil {
			r.Err = &Error{Kind: ErrTransient, Message: "batch result body: " + err.Error()}
		} else {
			r.Response, r.Err = chatResponse(resp, nil)
		}
	case o.Response != nil:
		var body openai.ErrorResponse
		if json.Unmarshal(o.Response.Body, &body) == nil && body.Error != nil {
			body.Error.HTTPStatusCode = o.Response.StatusCode
			r.Err = inBatch(classify(body.Error, nil))
		} else {
			r.Err = inBatch(classify(&openai.RequestError{HTTPStatusCode: o.Response.StatusCode, Body: o.Response.Body,
				Err: errors.New("batch result without an error object")}, nil))
		}
	case o.Error != nil && o.Error.Code == "batch_expired":
		r.Err = &Error{Kind: ErrBatchExpired, Code: o.Error.Code, Message: o.Error.Message}
	case o.Error != nil && (o.Error.Code == "batch_cancelled" || o.Error.Code == "batch_canceled"):
		r.Err = &Error{Kind: ErrBatchCancelled, Code: o.Error.Code, Message: o.Error.Message}
	case o.Error != nil:
		r.Err = &Error{Kind: ErrTransient, Code: o.Error.Code, Message: o.Error.Message}
	default:
		r.Err = &Error{Kind: ErrTransient, Message: "batch result with neither a response nor an error"}
	}
	return r, true
}

// openaiBatch reads a batch object.
func openaiBatch(b openai.Batch) Batch {
	out := Batch{ID: b.ID, Created: time.Unix(int64(b.CreatedAt), 0), State: BatchInProgress,
		Total: b.RequestCounts.Total, Done: b.RequestCounts.Completed, Failed: b.RequestCounts.Failed}
	if b.ExpiresAt != nil {
		out.Expires = time.Unix(int64(*b.ExpiresAt), 0)
	}
	switch b.Status {
	case "completed":
		out.State = BatchEnded
	case "expired":
		out.State = BatchExpired
	case "cancelled":
		out.State = BatchCancelled
	case "failed":
		out.State, out.Err = BatchFailed, batchFailure(b)
	}
	return out
}

// batchFailure classifies why a batch failed from its errors.data: the
// enqueued-token limit is ErrBatchQueueFull; a provider's own failure
// (a server_error code, or none given) is transient; any other code
// (invalid_json_line, duplicate_custom_id, url_mismatch, model_mismatch,
// empty_file, too_many_tasks, …) says the file was wrong: permanent.
func batchFailure(b openai.Batch) error {
	e := &Error{Kind: ErrTransient, Message: fmt.Sprintf("batch %s failed", b.ID)}
	if b.Errors == nil || len(b.Errors.Data) == 0 {
		e.Message += " without a reason"
		return e
	}
	var msgs []string
	for i, d := range b.Errors.Data {
		switch {
		case d.Code == "token_limit_exceeded":
			e.Kind, e.Code = ErrBatchQueueFull, d.Code
		case d.Code != "" && d.Code != "server_error" && !errors.Is(e.Kind, ErrBatchQueueFull):
			e.Kind = ErrPermanent
		}
		if i == 0 && e.Code == "" {
			e.Code = d.Code
		}
		m := d.Code
		if d.Line != nil {
			m += fmt.Sprintf(" (line %d)", *d.Line)
		}
		msgs = append(msgs, m+": "+d.Message)
	}
	e.Message += ": " + strings.Join(msgs, "; ")
	return e
}
