package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/gateway"
)

// closedURL is the URL of a port nothing listens on (connection refused).
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/v1"
}

// TestNotSentSettlesNothing: a call that never reached the provider (the
// connection refused) answers 502 and gives everything back: the key's
// quota, its tpm and the model's bucket (whose period is a day here, so
// it does not refill during the test).
func TestNotSentSettlesNothing(t *testing.T) {
	t.Parallel()
	r := newRigWith(t, rigOpts{upstream: closedURL(t), period: 24 * time.Hour})
	secret, k := r.key(t, gateway.Spec{Name: "unreached", Tier: "paid", QuotaTokens: 10000, TPM: 5000})
	full := r.bucketTokens(t)
	for _, stream := range []bool{false, true} {
		res, err := r.post(context.Background(), secret, fmt.Sprintf(`{"model":%q,"stream":%v,"max_tokens":500,"messages":[{"role":"user","content":"hello"}]}`, r.model, stream), nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusBadGateway {
			t.Fatalf("stream %v: %d, want 502", stream, res.StatusCode)
		}
	}
	if got := r.used(t, k); got != 0 {
		t.Fatalf("quota used %d by calls that never reached the provider", got)
	}
	// (less at most a token: each call held the bucket its send lag's
	// refill below full, 250ms of a day's 100,000: 0.3 token)
	if got := r.bucketTokens(t); got < full-1 {
		t.Fatalf("bucket %d of %d after calls that never reached the provider", got, full)
	}
	// the key's tpm was given back: a request of most of it passes its check
	res, err := r.post(context.Background(), secret, fmt.Sprintf(`{"model":%q,"max_tokens":4500,"messages":[{"role":"user","content":"hello"}]}`, r.model), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("%d, want 502 (past the key's tpm, to the unreachable provider)", res.StatusCode)
	}
}

// stalling is an upstream that answers each call with what serve does.
func stalling(t *testing.T, serve func(w http.ResponseWriter, r *http.Request)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // then the server notices the gateway hanging up
		serve(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// TestStalledUpstream: a provider that never sends its headers, one
// whose stream stops, and one that sends an endless line are each cut
// off by the gateway (header timeout, idle timeout, line bound), which
// answers in OpenAI's error shape instead of hanging. The short limits
// are the rig's settings; the test asserts no timing, only that the
// requests end (its client gives up after a minute).
func TestStalledUpstream(t *testing.T) {
	t.Parallel()
	hang := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	oneChunkThenHang := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
	endlessLine := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: ")
		chunk := strings.Repeat("x", 32<<10)
		for r.Context().Err() == nil {
			if _, err := fmt.Fprint(w, chunk); err != nil {
				return
			}
		}
	}
	limits := func(c *gateway.Config) {
		c.HeaderTimeout, c.StreamIdle, c.MaxLine = 200*time.Millisecond, 200*time.Millisecond, 64<<10
	}
	tests := []struct {
		name   string
		serve  http.HandlerFunc
		stream bool
		want   int
		event  string // the error event a stream ends with
	}{
		{"no headers", hang, false, http.StatusGatewayTimeout, ""},
		{"no headers, stream", hang, true, http.StatusGatewayTimeout, ""},
		{"idle stream", oneChunkThenHang, true, http.StatusOK, "idle"},
		{"endless line", endlessLine, true, http.StatusOK, "longer than 65536 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRigWith(t, rigOpts{upstream: stalling(t, tt.serve), cfg: limits})
			secret, _ := r.key(t, gateway.Spec{Name: "stalled", Tier: "paid"})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := r.post(ctx, secret, fmt.Sprintf(`{"model":%q,"stream":%v,"max_tokens":20,"messages":[{"role":"user","content":"hello"}]}`, r.model, tt.stream), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || res.StatusCode != tt.want {
				t.Fatalf("%d %v %.200q, want %d", res.StatusCode, err, body, tt.want)
			}
			if tt.event != "" && (!strings.Contains(string(body), `data: {"error":`) || !strings.Contains(string(body), tt.event) || len(body) > 64<<10) {
				t.Fatalf("the stream ended without an error event about %q: %.300q (%d bytes)", tt.event, body, len(body))
			}
			if tt.event == "" && !strings.Contains(string(body), `"error"`) {
				t.Fatalf("%q: not OpenAI's error shape", body)
			}
		})
	}
}

// TestProviderAccountHidden: the provider's account headers
// (openai-organization, openai-project, Azure's x-ms-region...) are not
// forwarded, and its 401
// or 403 for the gateway's own key (whose body names that key, masked)
// is a 502 in the gateway's words, which does not blame the client's key.
func TestProviderAccountHidden(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusOK, http.StatusUnauthorized, http.StatusForbidden} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			up := stalling(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("openai-organization", "org-secretcorp")
				w.Header().Set("openai-project", "proj_secret")
				w.Header().Set("x-ms-region", "Sweden Central") // Azure's
				w.Header().Set("apim-request-id", "r-1")
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				if status != http.StatusOK {
					fmt.Fprint(w, `{"error":{"message":"Incorrect API key provided: sk-up***abcd. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)
					return
				}
				fmt.Fprint(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`)
			})
			// serve sets its security headers before the gateway answers
			secure := func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("X-Content-Type-Options", "nosniff")
					w.Header().Set("Content-Security-Policy", "default-src 'self'")
					h.ServeHTTP(w, r)
				})
			}
			r := newRigWith(t, rigOpts{upstream: up, wrap: secure})
			secret, k := r.key(t, gateway.Spec{Name: "curious", Tier: "paid", QuotaTokens: 10000})
			res, err := r.post(context.Background(), secret, fmt.Sprintf(`{"model":%q,"max_tokens":20,"messages":[{"role":"user","content":"hello"}]}`, r.model), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			for name := range res.Header {
				if n := strings.ToLower(name); strings.HasPrefix(n, "openai-") || strings.HasPrefix(n, "x-ms-") || strings.HasPrefix(n, "apim-") {
					t.Errorf("provider header %s forwarded", name)
				}
			}
			if res.Header.Get("X-Content-Type-Options") != "nosniff" || res.Header.Get("Content-Security-Policy") == "" {
				t.Errorf("%d lost the security headers set before the gateway: %v", res.StatusCode, res.Header)
			}
			if status == http.StatusOK {
				if res.StatusCode != http.StatusOK {
					t.Fatalf("%d %s", res.StatusCode, body)
				}
				return
			}
			if res.StatusCode != http.StatusBadGateway || strings.Contains(string(body), "sk-") || strings.Contains(string(body), "invalid_api_key") {
				t.Fatalf("%d %s, want 502 in the gateway's words", res.StatusCode, body)
			}
			if got := r.used(t, k); got != 0 {
				t.Fatalf("quota used %d by a call the provider refused", got)
			}
		})
	}
}

// TestUsageOverReservationCounted: when the provider reports more than
// the gateway reserved (its count missed something), the excess is
// counted in a metric (and logged), so the miss is visible.
func TestUsageOverReservationCounted(t *testing.T) {
	t.Parallel()
	up := stalling(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5000,"completion_tokens":1,"total_tokens":5001}}`)
	})
	r := newRigWith(t, rigOpts{upstream: up})
	secret, _ := r.key(t, gateway.Spec{Name: "undercounted", Tier: "paid"})
	res, err := r.post(context.Background(), secret, fmt.Sprintf(`{"model":%q,"max_tokens":20,"messages":[{"role":"user","content":"hello"}]}`, r.model), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%d", res.StatusCode)
	}
	// the reservation was input (~9) + 20; the provider reported 5001
	if got := r.metric(t, "prq_gateway_usage_over_reservation_tokens_total"); got < 4900 || got > 5001 {
		t.Fatalf("usage over the reservation counted %v, want some 4,970", got)
	}
}
