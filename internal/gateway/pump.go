package gateway

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
	"sync/atomic"
	"time"
)

// streamOut writes a translated stream to the client, in its API's
// events.
type streamOut interface {
	// begin writes the stream's first events (the status is written).
	begin(w http.ResponseWriter) error
	event(w http.ResponseWriter, ev streamEvent) error
	// end writes the last events, the usage known (nil: unknown).
	end(w http.ResponseWriter, u *usage) error
	// fail ends a stream that broke off with the API's error event.
	fail(w http.ResponseWriter, msg string)
}

// sse writes one server-sent event and flushes it.
func sse(w http.ResponseWriter, event string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if event != "" {
		_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	} else {
		_, err = fmt.Fprintf(w, "data: %s\n\n", b)
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	return err
}

// pump translates a provider's stream (in) into the client's (out) as it
// comes, and settles when it ends, however it ends: with the provider's
// usage before the client sees the end; without it (the client left, the
// stream broke off or went idle) the reservation stands, as the provider
// may have generated up to the cap.
func (g *Gateway) pump(w http.ResponseWriter, r *http.Request, q *request, resp *http.Response, cancel context.CancelFunc, in streamIn, out streamOut) {
	bg := context.WithoutCancel(r.Context())
	g.keyHeaders(bg, w.Header(), q) // the quota as reserved
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	settled := false
	defer func() {
		if !settled {
			g.settle(bg, q, nil, true)
		}
	}()
	if out.begin(w) != nil {
		return
	}
	event := ""
	idle, err := g.relay(resp, cancel, func(line []byte) bool {
		if name, ok := bytes.CutPrefix(line, []byte("event:")); ok {
			event = string(bytes.TrimSpace(name))
		} else if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			evs, done, failure := in.read(event, data)
			for _, ev := range evs {
				if out.event(w, ev) != nil {
					g.log.InfoContext(bg, "gateway: stream ended early", "key", q.key.ID, "model", q.model, "client_gone", true)
					return false
				}
			}
			switch {
			case failure != "":
				g.log.WarnContext(bg, "gateway: the provider's stream ended with an error", "key", q.key.ID, "model", q.model, "err", failure)
				out.fail(w, "The provider's stream failed: "+failure)
				return false
			case done:
				u := in.usage()
				g.settle(bg, q, u, true) // before the client sees the end
				settled = true
				out.end(w, u)
				return false
			}
		} else if len(line) == 0 {
			event = ""
		}
		return true
	})
	if err != nil {
		if msg, ok := g.brokeOff(bg, r, q, idle, err); ok {
			out.fail(w, msg)
		}
	}
}

// relay is the gateway's one reader of a provider's server-sent events:
// it reads the stream line by line, each at most Config.MaxLine bytes,
// ends it (cancel) when it is idle for Config.StreamIdle, and hands each
// line to line without its line end (an empty one ends an event), until
// line answers false (err nil) or the stream ends (io.EOF,
// errLineTooLong, the read's error: a last line without its line end is
// handed over first); idle says whether the idle limit ended it.
func (g *Gateway) relay(resp *http.Response, cancel context.CancelFunc, line func([]byte) bool) (idle bool, err error) {
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	var idled atomic.Bool
	timer := time.AfterFunc(g.cfg.StreamIdle, func() { idled.Store(true); cancel() })
	defer timer.Stop()
	for {
		l, err := readLine(rd, g.cfg.MaxLine)
		timer.Reset(g.cfg.StreamIdle)
		if len(l) > 0 && !line(bytes.TrimRight(l, "\r\n")) {
			return idled.Load(), nil
		}
		if err != nil {
			return idled.Load(), err
		}
	}
}

// brokeOff logs a provider's stream that ended early (err: why, idle:
// the idle limit ended it) and is the client's message of it, every API
// the same; ok false when the client left first (it gets nothing).
func (g *Gateway) brokeOff(ctx context.Context, r *http.Request, q *request, idle bool, err error) (msg string, ok bool) {
	if r.Context().Err() != nil {
		g.log.InfoContext(ctx, "gateway: stream ended early", "key", q.key.ID, "model", q.model, "client_gone", true)
		return "", false
	}
	msg = "The provider's stream broke off."
	switch {
	case idle:
		msg = fmt.Sprintf("The provider's stream was idle for %s; the gateway ended it.", g.cfg.StreamIdle)
	case errors.Is(err, errLineTooLong):
		msg = fmt.Sprintf("The provider's stream sent a line longer than %d bytes; the gateway ended it.", g.cfg.MaxLine)
	}
	g.log.WarnContext(ctx, "gateway: stream ended early", "key", q.key.ID, "model", q.model, "idle", idle, "err", err)
	return msg, true
}

// providerFailure answers a provider's refusal or failure (any non-200)
// of a translated request in the client's shape, and settles: the
// gateway's own key or account refused is a 502 naming no key (nothing
// generated); a 429 (after the gateway's requeues) stays 429 with its
// Retry-After (nothing generated); an overload or a server error may
// have run (the reservation stands) and is a 502 (503 for an overload);
// other refusals keep their status and the provider's message.
func (g *Gateway) providerFailure(w http.ResponseWriter, r *http.Request, q *request, resp *http.Response, body []byte) {
	ctx := r.Context()
	bg := context.WithoutCancel(ctx)
	var e struct {
		Error struct {
			Type    any    `json:"type"`
			Message string `json:"message"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	json.Unmarshal(body, &e)
	msg := strings.TrimSpace(e.Error.Message)
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	switch status := resp.StatusCode; {
	case status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusPaymentRequired:
		g.settleNothing(bg, q)
		g.log.ErrorContext(ctx, "gateway: the provider refused the gateway's key", "status", status, "type", e.Error.Type, "code", e.Error.Code, "model", q.model)
		q.fail(w, http.StatusBadGateway, "server_error", "upstream_auth", "The provider refused the gateway's credentials; the gateway's operator has been told. Your key is fine.")
	case status == http.StatusTooManyRequests:
		g.settle(bg, q, nil, false)
		if v := resp.Header.Get("retry-after"); v != "" {
			w.Header().Set("Retry-After", v)
		}
		g.keyHeaders(bg, w.Header(), q)
		q.fail(w, http.StatusTooManyRequests, "requests", "rate_limit_exceeded", "The provider's rate limit was reached: "+msg)
	case status == 529 || status == http.StatusServiceUnavailable:
		g.settle(bg, q, nil, true)
		g.keyHeaders(bg, w.Header(), q)
		q.fail(w, http.StatusServiceUnavailable, "server_error", "overloaded", "The provider is overloaded; try again later.")
	case status >= 500:
		g.settle(bg, q, nil, true)
		g.log.WarnContext(ctx, "gateway: the provider failed", "status", status, "type", e.Error.Type, "model", q.model)
		g.keyHeaders(bg, w.Header(), q)
		q.fail(w, http.StatusBadGateway, "server_error", "", fmt.Sprintf("The provider failed (%d).", status))
	default:
		g.settle(bg, q, nil, false)
		g.keyHeaders(bg, w.Header(), q)
		q.fail(w, status, "invalid_request_error", "", "The provider refused the request: "+msg)
	}
}

// readReply reads a non-streaming reply's body; a cut one is answered
// (502) with the reservation standing.
func (g *Gateway) readReply(w http.ResponseWriter, r *http.Request, q *request, resp *http.Response) ([]byte, bool) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		g.settle(context.WithoutCancel(r.Context()), q, nil, true)
		if r.Context().Err() == nil {
			q.fail(w, http.StatusBadGateway, "server_error", "", "The provider's reply was cut off.")
		}
		return nil, false
	}
	return body, true
}
