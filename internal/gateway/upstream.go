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
	for attempt := 1; err == nil && attempt <= maxRequeues && resp.StatusCode == http.StatusTooManyRequests && time.Now().Before(q.deadline); attempt++ {
		// the provider's limit was reached before ours (its clock runs on
		// a little after admission): the bucket is penalized until its
		// retry time; wait in the order again, within the deadline
		reason, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if bytes.Contains(reason, []byte("insufficient_quota")) {
			resp, err = replay(resp, reason), nil
			break
		}
		if serr := g.adm.Settle(bg, q.model, q.ticket, ratelimit.Cost{Requests: 1, Tokens: q.est}); serr != nil && !errors.Is(serr, ratelimit.ErrNotReserved) {
			g.log.WarnContext(ctx, "gateway: settling a refused call failed", "key", q.key.ID, "err", serr)
		}
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
		if serr := g.adm.Settle(bg, q.model, q.ticket, ratelimit.Cost{}); serr != nil && !errors.Is(serr, ratelimit.ErrNotReserved) {
			g.log.WarnContext(ctx, "gateway: refunding the bucket failed; it keeps the estimate", "key", q.key.ID, "err", serr)
		}
		return true
	case err == nil && (resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests):
		// the provider failed it (an error is not billed) or kept
		// refusing it: the provider counted the request
		resp.Body.Close()
		if serr := g.adm.Settle(bg, q.model, q.ticket, ratelimit.Cost{Requests: 1, Tokens: q.est}); serr != nil && !errors.Is(serr, ratelimit.ErrNotReserved) {
			g.log.WarnContext(ctx, "gateway: settling a failed call failed", "key", q.key.ID, "err", serr)
		}
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

// call makes one upstream call and syncs the model's bucket with the
// provider's rate-limit headers (a 429 penalizes it until the retry time).
func (g *Gateway) call(ctx, cctx context.Context, q *request, op string, body []byte) (*http.Response, error) {
	m := g.cfg.Models[q.model]
	p := m.Provider
	// the key admission charged (several keys: each has its own bucket)
	key := 0
	if len(p.Keys) > 1 {
		k, err := g.adm.KeyOf(ctx, q.model, q.ticket)
		if err != nil || k < 0 || k >= len(p.Keys) {
			g.log.WarnContext(ctx, "gateway: could not read which key the request was admitted on; calling with the first", "model", q.model, "err", err)
			k = 0
		}
		key = k
	}
	up, err := p.newUpstream(cctx, m.Deployment, op, body, p.Keys[key])
	if err != nil {
		return nil, err
	}
	for name, vs := range q.upHeader {
		up.Header[name] = vs
	}
	// the transport writes on its own goroutine; a window counts the
	// call from its write (see Scheduler.Sent)
	callingStart := time.Now()
	model, ticket := q.model, q.ticket // q's ticket changes if the request goes back through admission
	tctx, trace := admission.TraceCall(up.Context(), callingStart, func(after time.Duration) {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := g.adm.Sent(sctx, model, ticket, after); err != nil {
			g.wayUnknown(model)
			g.log.WarnContext(ctx, "gateway: could not move the charge to the request's write; the window margin, at its default for two windows, covers the difference", "model", model, "err", err)
		}
	})
	up = up.WithContext(tctx)
	// the charge moves to the call: the bucket counts what the provider
	// has not seen, the window counts from here
	if err := g.adm.Calling(ctx, q.model, q.ticket); err != nil {
		g.wayUnknown(q.model)
		g.log.WarnContext(ctx, "gateway: could not move the charge to the call; the window margin, at its default for two windows, covers the difference", "model", q.model, "err", err)
	}
	callStart := time.Now()
	resp, err := g.cfg.Client.Do(up)
	if err != nil {
		if !trace.Wrote() {
			return nil, &notSentError{err: err}
		}
		return nil, err
	}
	g.scrubError(resp)
	if b, ok := g.adm.Bucket(q.model); ok {
		// the request's way to the provider, for a window's margin
		if way, ok := trace.Way(resp.Header); ok {
			b.ObserveWay(way)
			// the provider counted the call by its write and that way
			if err := g.adm.Arrived(context.WithoutCancel(ctx), q.model, q.ticket, way); err != nil {
				g.log.WarnContext(ctx, "gateway: could not record the call's way to the provider; its charge counts the window margin past its write", "model", q.model, "err", err)
			}
		}
		if kb := b.ForKey(key); kb != nil {
			if _, err := kb.Sync(context.WithoutCancel(ctx), resp.StatusCode, resp.Header, time.Since(callStart)); err != nil {
				g.log.WarnContext(ctx, "gateway: could not sync the bucket with the provider's headers", "model", q.model, "err", err)
			}
		}
	}
	return resp, nil
}

// wayUnknown holds a model's window margin at its default for a while: a
// charge stayed short of its call's write.
func (g *Gateway) wayUnknown(model string) {
	if b, ok := g.adm.Bucket(model); ok && b != nil {
		b.WayUnknown()
	}
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
	if err := g.adm.Settle(ctx, q.model, q.ticket, ratelimit.Cost{}); err != nil && !errors.Is(err, ratelimit.ErrNotReserved) {
		g.log.WarnContext(ctx, "gateway: refunding the bucket failed; it keeps the estimate", "key", q.key.ID, "err", err)
	}
	g.settleQuota(ctx, q, amounts{})
	if q.tpm != nil {
		g.settleTPM(ctx, q, 0)
	}
	g.log.InfoContext(ctx, "gateway request not sent", "key", q.key.ID, "model", q.model, "admission_wait", q.waited)
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
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
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

// cost is what a call of q's model with usage r cost at the model's
// prices (those of the tier that served it), in dollars.
func (g *Gateway) cost(q *request, r llm.Response) float64 {
	return g.cfg.Models[q.model].Prices.Of(r).Cost(r)
}

// price counts d dollars, what a call with usage r cost: by key (metric
// and the key's spend this month) and by model and tier (CostFunc).
func (g *Gateway) price(ctx context.Context, q *request, r llm.Response, d float64) {
	if d <= 0 { // an unpriced model
		return
	}
	lane := "sync"
	if r.ServiceTier == llm.ServiceTierFlex {
		lane = llm.ServiceTierFlex
	}
	key, tier, model := q.key.ID, q.key.Tier, q.model
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

// settle books a finished call: with the provider's usage when known;
// without it, the whole reservation when the provider may have run the
// call (ran), nothing when it refused it.
func (g *Gateway) settle(ctx context.Context, q *request, u *usage, ran bool) {
	tokens, spent := q.est, amounts{}
	if ran {
		spent = q.holds()
	}
	var r llm.Response
	var dollars float64
	if u != nil {
		tokens = u.PromptTokens + u.CompletionTokens
		r = u.response()
		dollars = g.cost(q, r)
		spent = amounts{tokens: tokens, nano: ratelimit.NanoCost(dollars)}
		g.metrics.used(q.key.ID, u.PromptTokens, u.CompletionTokens)
		if reserved := q.input + q.cap*q.n; tokens > reserved {
			// the count missed something the provider counts: the quota
			// may overshoot by the difference
			g.metrics.overshot(q.key.ID, tokens-reserved)
			g.log.WarnContext(ctx, "gateway: usage above the reservation", "key", q.key.ID, "model", q.model,
				"reserved", reserved, "input_counted", q.input, "prompt_tokens", u.PromptTokens, "completion_tokens", u.CompletionTokens)
		}
	}
	cost := ratelimit.Cost{Requests: 1, Tokens: tokens}
	if u != nil {
		cost.Input, cost.Output = u.PromptTokens, u.CompletionTokens
	}
	if err := g.adm.Settle(ctx, q.model, q.ticket, cost); err != nil && !errors.Is(err, ratelimit.ErrNotReserved) {
		g.log.WarnContext(ctx, "gateway: settling the bucket failed; it keeps the estimate", "key", q.key.ID, "err", err)
	}
	g.settleQuota(ctx, q, spent)
	if u != nil {
		g.price(ctx, q, r, dollars)
	}
	if q.tpm != nil {
		g.settleTPM(ctx, q, tokens)
	}
	g.log.InfoContext(ctx, "gateway request", "key", q.key.ID, "model", q.model, "input", q.input, "cap", q.cap,
		"usage_known", u != nil, "tokens", tokens, "admission_wait", q.waited, "took", time.Since(q.started))
}
