package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/gateway"
)

// zeros is a chat body whose unknown field holds n zeros: the probe
// that took the gateway 11.8 s and 418 MB at 8 MB.
func zeros(model string, n int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"model":%q,"messages":[{"role":"user","content":"hi"}],"x":[0`, model)
	for range n - 1 {
		b.WriteString(",0")
	}
	b.WriteString("]}")
	return b.Bytes()
}

// TestUnpayableBodyRefused: what a body costs is bounded by what its key
// could ever pay for before it is decoded or counted: a body larger than
// a key's quota could pay for is refused by its Content-Length without
// being read (403); one past the shape limits is refused by the scan
// (400); one whose count passes what is left is refused once the count
// passes it (403). Nothing is reserved or sent.
func TestUnpayableBodyRefused(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	small, ks := r.key(t, gateway.Spec{Name: "small", Tier: "paid", QuotaTokens: 1000})
	open, _ := r.key(t, gateway.Spec{Name: "open", Tier: "paid"})
	large, kl := r.key(t, gateway.Spec{Name: "large", Tier: "paid", QuotaTokens: 100000})

	// 8 MB announced, nothing sent: the answer comes without the body
	u, _ := url.Parse(r.url)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", u.Host, small, 8<<20)
	conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // a failure, not a timing: without the bound it waits for the body
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer before the body: %v", err)
	}
	var e apiErr
	jsonDecode(res, &e)
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden || e.Error.Type != "insufficient_quota" || !strings.Contains(e.Error.Message, "8388608 bytes") {
		t.Fatalf("%d %+v, want 403 insufficient_quota naming the body's size", res.StatusCode, e)
	}

	tests := []struct {
		name, key string
		body      []byte
		status    int
		code      string
	}{
		{"array past the limit", open, zeros(r.model, 20000), http.StatusBadRequest, "request_too_large"},
		{"nested past the limit", open, []byte(`{"model":"` + r.model + `","messages":[{"role":"user","content":"hi"}],"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`), http.StatusBadRequest, "request_too_large"},
		{"least count past the quota", small, []byte(`{"model":"` + r.model + `","messages":[{"role":"user","content":"` + strings.Repeat("x", 200000) + `"}]}`), http.StatusForbidden, "quota_exceeded"},
		{"least cuts past the quota", large, []byte(`{"model":"` + r.model + `","messages":[{"role":"user","content":"` + strings.Repeat("0,", 150000) + `"}]}`), http.StatusForbidden, "quota_exceeded"},
		{"count past the quota", large, []byte(`{"model":"` + r.model + `","messages":[{"role":"user","content":"` + strings.Repeat("中文", 30000) + `"}]}`), http.StatusForbidden, "quota_exceeded"},
		{"count past the context", open, []byte(`{"model":"` + r.model + `","messages":[{"role":"user","content":"` + strings.Repeat("0,", 150000) + `"}]}`), http.StatusBadRequest, "context_length_exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := r.post(context.Background(), tt.key, string(tt.body), nil)
			if err != nil {
				t.Fatal(err)
			}
			var e apiErr
			jsonDecode(res, &e)
			res.Body.Close()
			if res.StatusCode != tt.status || e.Error.Code == nil || *e.Error.Code != tt.code {
				t.Fatalf("%d %+v, want %d %s", res.StatusCode, e, tt.status, tt.code)
			}
		})
	}
	if got := r.used(t, ks) + r.used(t, kl); got != 0 {
		t.Fatalf("%d tokens reserved for refused bodies", got)
	}
	if n := r.fake.Stats()[r.model].Requests; n != 0 {
		t.Fatalf("%d upstream calls for refused bodies", n)
	}
}

// BenchmarkHugeBody: the cost of refusing an 8 MB body, without the
// network (the handler called directly, the body in memory): under a key
// whose quota has 1,000 tokens (refused by its Content-Length, unread),
// under a key without a quota (the scan's array limit), and an 8 MB
// prompt of "0,0,..." under a key without a quota (counting stops past
// the model's context). It reports ns and bytes allocated per refusal.
func BenchmarkHugeBody(b *testing.B) {
	r := newRig(b, 0)
	quota, _ := r.key(b, gateway.Spec{Name: "quota", Tier: "paid", QuotaTokens: 1000})
	open, _ := r.key(b, gateway.Spec{Name: "open", Tier: "paid"})
	arr := zeros(r.model, 4_000_000) // 8 MB
	prompt := []byte(`{"model":"` + r.model + `","messages":[{"role":"user","content":"` + strings.Repeat("0,", 4_000_000) + `"}]}`)
	for _, tc := range []struct {
		name, key string
		body      []byte
		want      int
	}{{"quota_key", quota, arr, http.StatusForbidden}, {"open_key_array", open, arr, http.StatusBadRequest}, {"open_key_prompt", open, prompt, http.StatusBadRequest}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(tc.body))
				req.Header.Set("Authorization", "Bearer "+tc.key)
				rec := httptest.NewRecorder()
				r.handler.ServeHTTP(rec, req)
				if rec.Code != tc.want {
					b.Fatalf("%d %s", rec.Code, rec.Body.String())
				}
			}
		})
	}
}

// TestCutShortBody: a body that ends before its Content-Length (the
// client closed its side) is a 400 that says so, with nothing sent or
// reserved, not a 200 with an empty body.
func TestCutShortBody(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	secret, k := r.key(t, gateway.Spec{Name: "cut", Tier: "paid", QuotaTokens: 100000})
	u, _ := url.Parse(r.url)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":", u.Host, secret)
	conn.(*net.TCPConn).CloseWrite()
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	var e apiErr
	jsonDecode(res, &e)
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(e.Error.Message, "cut short") {
		t.Fatalf("%d %+v, want 400 saying the body was cut short", res.StatusCode, e)
	}
	if n := r.fake.Stats()[r.model].Requests; n != 0 || r.used(t, k) != 0 {
		t.Fatalf("%d upstream calls, %d tokens reserved for a cut body", n, r.used(t, k))
	}
}
