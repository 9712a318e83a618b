package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
)

// usage is the provider's count of a call.
type usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	// PromptTokensDetails is OpenAI's: the prompt tokens its cache served.
	PromptTokensDetails *promptDetails `json:"prompt_tokens_details,omitempty"`
	// cacheRead and cacheWrite are Anthropic's cache reads and writes,
	// within PromptTokens (priced apart).
	cacheRead, cacheWrite int64
	// serviceTier is the tier OpenAI says served the call ("flex" is
	// priced at half).
	serviceTier string
}

type promptDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

// response is the usage as llm prices it: the prompt tokens a
// provider's cache served (OpenAI's cached tokens, Anthropic's cache
// reads) and those written to it apart, and the tier that served it.
func (u *usage) response() llm.Response {
	var cached int64
	if u.PromptTokensDetails != nil {
		cached = u.PromptTokensDetails.CachedTokens
	}
	return llm.Response{PromptTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, CachedTokens: max(cached, u.cacheRead),
		CacheWriteTokens: u.cacheWrite, ServiceTier: u.serviceTier}
}

// forwardable reports whether a provider header is forwarded: not
// hop-by-hop ones, lengths the gateway changes, nor the provider's own
// rate limits (of the shared account; the reply describes the key's),
// nor the account's details.
func forwardable(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case "connection", "keep-alive", "transfer-encoding", "content-length", "upgrade", "proxy-connection", "te", "trailer", "set-cookie":
		return false
	}
	// nor the provider account's details (openai-organization,
	// openai-project, Azure's region and deployment, Anthropic's
	// organization...)
	for _, prefix := range []string{"x-ratelimit-", "openai-", "x-ms-", "apim-", "azureml-", "anthropic-"} {
		if strings.HasPrefix(n, prefix) {
			return false
		}
	}
	return true
}

// forward makes the admitted call with ex and answers with its reply,
// settling the bucket and the quota with what the provider reports it
// used. With failover, a call the provider failed (5xx, an overload, not
// sent, 429s past the requeues) is not answered: its bucket is settled,
// the quota reservation stays, and forward reports true (the request
// moves to a fallback).
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, q *request, ex exchange, failover bool) (moveOn bool) {
	ctx := r.Context()
	bg := context.WithoutCancel(ctx)
	m := g.cfg.Models[q.model]
	op, body, err := ex.build(m, q)
	if err != nil {
		g.settleNothing(bg, q)
		g.log.ErrorContext(ctx, "gateway: building the upstream request failed", "key", q.key.ID, "model", q.model, "err", err)
		q.fail(w, http.StatusInternalServerError, "server_error", "", "The gateway could not build the provider's request.")
		return false
	}
	// a stream's call is cancelled when it goes idle (forwardStream)
	cctx, cancel := context.WithCancel(ctx)
	if !ex.streams() {
		cctx, cancel = context.WithTimeout(ctx, g.cfg.Timeout)
	}
	defer cancel()
	resp, err := g.call(ctx, cctx, q, op, body)
	for attempt := 1; err == nil && attempt <= maxRequeues && q.outcome == llmcall.RateLimited && time.Now().Before(q.deadline); attempt++ {
		// the provider's limit was reached before ours (its clock runs on
		// a little after admission): the bucket is penalized until its
		// retry time; wait in the order again, within the deadline
		resp.Body.Close()
		g.settleBucket(bg, q, g.cfg.Models[q.model].Model.Settle(llmcall.RateLimited, nil, q.est, false).Bucket)
		g.log.InfoContext(ctx, "gateway: provider 429; back through admission", "key", q.key.ID, "model", q.model, "attempt", attempt)
		q.ticket = fmt.Sprintf("%s-r%d", q.id, attempt)
		if !g.admit(w, r, q) { // answered, reservations given back
			return false
		}
		resp, err = g.call(ctx, cctx, q, op, body)
	}
	var ns *notSentError
	switch {
	case !failover || ctx.Err() != nil:
	case errors.As(err, &ns):
		// never sent: the bucket gets its charge back, the quota's stays
		g.settleBucket(bg, q, ratelimit.Cost{})
		return true
	case err == nil && (q.outcome == llmcall.Transient || q.outcome == llmcall.RateLimited):
		// the provider failed it (an error is not billed) or kept
		// refusing it: the provider counted the request
		resp.Body.Close()
		g.settleBucket(bg, q, g.cfg.Models[q.model].Model.Settle(llmcall.Transient, nil, q.est, false).Bucket)
		return true
	}
	if err != nil {
		// a call that was never written out (no connection, DNS, the
		// client gone first) cost nothing; one that was may have run:
		// it keeps the whole reservation
		if errors.As(err, &ns) {
			g.settleNothing(bg, q)
		} else {
			g.settle(bg, q, nil, true)
		}
		var ne net.Error
		switch {
		case ctx.Err() != nil: // the client left
		case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
			g.log.WarnContext(ctx, "gateway: upstream call timed out", "key", q.key.ID, "model", q.model, "err", err)
			q.fail(w, http.StatusGatewayTimeout, "server_error", "", "The provider did not answer in time.")
		default:
			g.log.WarnContext(ctx, "gateway: upstream call failed", "key", q.key.ID, "model", q.model, "err", err)
			q.fail(w, http.StatusBadGateway, "server_error", "", "The gateway could not reach the provider.")
		}
		return false
	}
	defer resp.Body.Close()
	ex.answer(g, w, r, q, m, resp, cancel)
	return false
}

// copyHeaders copies the provider's headers that are forwarded.
func copyHeaders(w http.ResponseWriter, resp *http.Response) {
	for name, vs := range resp.Header {
		if forwardable(name) {
			w.Header()[name] = vs
		}
	}
}

// maxRequeues bounds how often a call the provider refused with 429 goes
// back through admission.
const maxRequeues = 3

// call makes one upstream call in llmcall's steps: the key admission
// charged, the charge moved to the call and its write, the reply's way
// and the key's bucket synced with the provider's headers (a 429
// penalizes it until the retry time), and the pause policy for a
// provider that refuses the gateway's credentials.
func (g *Gateway) call(ctx, cctx context.Context, q *request, op string, body []byte) (*http.Response, error) {
	m := g.cfg.Models[q.model]
	c := g.proto.Begin(ctx, g.cfg.Models[q.model].Model, q.ticket)
	q.call = c
	up, err := m.Provider.newUpstream(cctx, m.Deployment, op, body, m.Provider.Keys[c.Key()])
	if err != nil {
		return nil, err
	}
	for name, vs := range q.upHeader {
		up.Header[name] = vs
	}
	up = up.WithContext(c.Calling(ctx, up.Context()))
	resp, err := g.cfg.Client.Do(up)
	if err != nil {
		if !c.Wrote() {
			return nil, &notSentError{err: err}
		}
		return nil, err
	}
	g.scrubError(resp)
	q.outcome = llmcall.ReplyOutcome(resp.StatusCode, nil, false)
	if resp.StatusCode == http.StatusTooManyRequests {
		// a 429 is read: a limit's, the account's (insufficient_quota),
		// or flex processing's refusal (which hit no limit)
		reason, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		resp = replay(resp, reason)
		q.outcome = llmcall.ReplyOutcome(resp.StatusCode, reason, true)
	}
	if q.outcome != llmcall.FlexRefused {
		c.Observe(ctx, resp.StatusCode, resp.Header)
	}
	if q.outcome.Account() {
		q.outcome = c.Resolve(ctx, q.outcome, fmt.Errorf("the provider refused the gateway's key: status %d", resp.StatusCode))
	}
	return resp, nil
}

// notSentError is a call that failed before its request was written
// out: the provider never saw it.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return "not sent: " + e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// streamBrokeOff ends a client's stream whose provider stream broke off
// (idle, a line too long, a read error) with OpenAI's error event, and
// logs why; a client that left first gets nothing.
func (g *Gateway) streamBrokeOff(ctx context.Context, w http.ResponseWriter, r *http.Request, q *request, idle bool, err error) {
	if msg, ok := g.brokeOff(ctx, r, q, idle, err); ok {
		streamError(w, msg)
	}
}

// settleNothing books a call the provider never saw: the bucket, the
// quota and the key's tpm get their whole reservations back.
func (g *Gateway) settleNothing(ctx context.Context, q *request) {
	g.settleBucket(ctx, q, ratelimit.Cost{})
	g.settleQuota(ctx, q, llmcall.Settlement{})
	if q.tpm != nil {
		g.settleTPM(ctx, q, 0)
	}
	g.log.InfoContext(ctx, "gateway request not sent", "key", q.key.ID, "model", q.model, "admission_wait", q.waited)
}

// used counts what a call used by its key, and warns of usage above its
// reservation: the count missed something the provider counts, and the
// quota may overshoot by the difference.
func (g *Gateway) used(ctx context.Context, q *request, u *usage) {
	g.metrics.used(q.key.ID, u.PromptTokens, u.CompletionTokens)
	if tokens, reserved := u.PromptTokens+u.CompletionTokens, q.input+q.cap*q.n; tokens > reserved {
		g.metrics.overshot(q.key.ID, tokens-reserved)
		g.log.WarnContext(ctx, "gateway: usage above the reservation", "key", q.key.ID, "model", q.model,
			"reserved", reserved, "input_counted", q.input, "prompt_tokens", u.PromptTokens, "completion_tokens", u.CompletionTokens)
	}
}

// settleBucket settles the current attempt's ticket in its model's
// bucket with cost (a llmcall.Settlement's Bucket), and with what its
// call knows of its way to the provider (its write, its reply's bound).
func (g *Gateway) settleBucket(ctx context.Context, q *request, cost ratelimit.Cost) {
	way := admission.NoWay
	if q.call != nil && q.call.Ticket() == q.ticket {
		way = q.call.SettleWay()
	}
	if err := g.adm.SettleCall(ctx, q.model, q.ticket, cost, way); err != nil && !errors.Is(err, ratelimit.ErrNotReserved) {
		g.log.WarnContext(ctx, "gateway: settling the bucket failed; it keeps the estimate", "key", q.key.ID, "err", err)
	}
}

// replay gives back a response whose body was read.
func replay(resp *http.Response, body []byte) *http.Response {
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp
}

// forwardWhole answers with a non-streaming reply (or an error).
func (g *Gateway) forwardWhole(w http.ResponseWriter, r *http.Request, q *request, resp *http.Response) {
	ctx := r.Context()
	bg := context.WithoutCancel(ctx)
	body, ok := g.readReply(w, r, q, resp)
	if !ok {
		return
	}
	switch o := q.outcome; {
	case o == llmcall.FlexRefused || o.Account() && resp.StatusCode == http.StatusTooManyRequests:
		// flex refused, or insufficient_quota (paused: call): not
		// counted; the reply relayed as the provider's
		g.settleNothing(bg, q)
	case o.Account():
		// the gateway's own key was refused: not the client's fault, and
		// the body names the (masked) upstream key
		g.settleNothing(bg, q)
		var e struct {
			Error struct{ Type, Code any } `json:"error"`
		}
		json.Unmarshal(body, &e)
		g.log.ErrorContext(ctx, "gateway: the provider refused the gateway's key", "status", resp.StatusCode, "type", e.Error.Type, "code", e.Error.Code, "model", q.model)
		for name := range resp.Header { // the provider's, not what was set before (serve's security headers)
			w.Header().Del(name)
		}
		q.fail(w, http.StatusBadGateway, "server_error", "upstream_auth", "The provider refused the gateway's credentials; the gateway's operator has been told. Your key is fine.")
		return
	case resp.StatusCode == http.StatusOK:
		var reply struct {
			Usage       *usage `json:"usage"`
			ServiceTier string `json:"service_tier"`
		}
		json.Unmarshal(body, &reply)
		if reply.Usage != nil {
			reply.Usage.serviceTier = reply.ServiceTier
		}
		g.settle(bg, q, reply.Usage, true)
	case resp.StatusCode >= 500:
		g.settle(bg, q, nil, true) // it may have run: never overshoot
	default: // refused: nothing generated
		g.settle(bg, q, nil, false)
	}
	g.keyHeaders(bg, w.Header(), q)
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
}

// forwardStream relays server-sent events as they come, reads the usage
// chunk the gateway asked for (and drops it when the client did not ask),
// and settles when the stream ends, however it ends.
func (g *Gateway) forwardStream(w http.ResponseWriter, r *http.Request, q *request, resp *http.Response, clientUsage bool, cancel context.CancelFunc) {
	bg := context.WithoutCancel(r.Context())
	g.keyHeaders(bg, w.Header(), q) // the quota as reserved: the stream's use is not known yet
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	var got *usage
	settled := false
	var event bytes.Buffer
	write := func() bool {
		defer event.Reset()
		if event.Len() == 0 {
			return true
		}
		if _, err := w.Write(append(event.Bytes(), '\n')); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	idle, err := g.relay(resp, cancel, func(line []byte) bool {
		if len(line) == 0 {
			return write()
		}
		keep := true
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			data = bytes.TrimSpace(data)
			var chunk struct {
				Choices     []json.RawMessage `json:"choices"`
				Usage       *usage            `json:"usage"`
				ServiceTier string            `json:"service_tier"`
			}
			switch {
			case bytes.Equal(data, []byte("[DONE]")):
				if !settled { // settled before the client sees the end
					g.settle(bg, q, got, true)
					settled = true
				}
			case json.Unmarshal(data, &chunk) == nil && chunk.Usage != nil:
				got = chunk.Usage
				got.serviceTier = chunk.ServiceTier
				keep = clientUsage || len(chunk.Choices) > 0
			}
		}
		if keep {
			event.Write(line)
			event.WriteByte('\n')
		}
		return true
	})
	if err != nil {
		write()
		if !errors.Is(err, io.EOF) {
			g.streamBrokeOff(bg, w, r, q, idle, err)
		}
	}
	if !settled {
		// without a usage chunk (the client left, the stream broke) the
		// provider may have generated up to the cap: the reservation stands
		g.settle(bg, q, got, true)
	}
}

// errLineTooLong is an upstream stream line over Config.MaxLine.
var errLineTooLong = errors.New("gateway: upstream stream line too long")

// readLine reads a line of at most max bytes.
func readLine(rd *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := rd.ReadSlice('\n')
		if len(line)+len(frag) > max {
			return nil, errLineTooLong
		}
		line = append(line, frag...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

// streamError ends a stream with an error event in OpenAI's shape (what
// the SDKs raise mid-stream).
func streamError(w http.ResponseWriter, msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "server_error", "param": nil, "code": nil}})
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// price counts what a call cost (st, from its usage): by key (metric
// and the key's spend this month) and by model, tier and lane
// (CostFunc).
func (g *Gateway) price(ctx context.Context, q *request, st llmcall.Settlement) {
	d := st.Dollars
	if d <= 0 { // an unpriced model
		return
	}
	key, tier, model, lane := q.key.ID, q.key.Tier, q.model, st.Lane
	ctx = context.WithoutCancel(ctx)
	// counted off the reply's way: the client waits for none of it
	go func() {
		if err := g.keys.AddSpend(ctx, key, d); err != nil {
			g.log.WarnContext(ctx, "gateway: counting the key's spend failed", "key", key, "err", err)
		}
		if g.cfg.CostFunc != nil {
			g.cfg.CostFunc(model, tier, lane, d)
		}
		g.metrics.spent(key, model, d)
	}()
}

// settle books a finished call by llmcall's settle rule: with the
// provider's usage when known; without it, as a call the provider may
// have run (ran: the bucket keeps the estimate, the quota the whole
// reservation) or one it refused (the estimate, nothing of the quota).
func (g *Gateway) settle(ctx context.Context, q *request, u *usage, ran bool) {
	o, tokens := llmcall.Permanent, q.est
	var r *llm.Response
	switch {
	case u != nil:
		o, tokens = llmcall.OK, u.PromptTokens+u.CompletionTokens
		resp := u.response()
		r = &resp
		g.used(ctx, q, u)
	case ran:
		o = llmcall.Transient
	}
	st := g.cfg.Models[q.model].Model.Settle(o, r, q.est, false)
	g.settleBucket(ctx, q, st.Bucket)
	g.settleQuota(ctx, q, st)
	if r != nil {
		g.price(ctx, q, st)
	}
	if q.tpm != nil {
		g.settleTPM(ctx, q, tokens)
	}
	g.log.InfoContext(ctx, "gateway request", "key", q.key.ID, "model", q.model, "input", q.input, "cap", q.cap,
		"usage_known", u != nil, "tokens", tokens, "admission_wait", q.waited, "took", time.Since(q.started))
}
