package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/gateway"
)

// TestStalledBodyAnswered408: a body that stops arriving is answered 408
// once BodyTimeout passes, on chat and on messages, with and without a
// quota: never 200 with an empty body.
func TestStalledBodyAnswered408(t *testing.T) {
	t.Parallel()
	r := newRigWith(t, rigOpts{cfg: func(c *gateway.Config) { c.BodyTimeout = 200 * time.Millisecond }})
	open, _ := r.key(t, gateway.Spec{Name: "open", Tier: "paid"})
	quota, _ := r.key(t, gateway.Spec{Name: "quota", Tier: "paid", QuotaTokens: 100000})
	u, _ := url.Parse(r.url)
	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		for name, key := range map[string]string{"open": open, "quota": quota} {
			t.Run(path+" "+name, func(t *testing.T) {
				conn, err := net.Dial("tcp", u.Host)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"model\":%q,", path, u.Host, key, r.model)
				conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // a failure, not a timing: the answer comes at BodyTimeout
				res, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					t.Fatalf("no answer to a stalled body: %v", err)
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "did not arrive") {
					t.Fatalf("stalled body: %d %s, want 408", res.StatusCode, b)
				}
			})
		}
	}
}

// gated yields n bytes of a JSON string's inside, all but the last at
// once, then announces that and blocks until released: a body whose
// bytes are charged and held.
type gated struct {
	head    string
	n       int
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gated) Read(p []byte) (int, error) {
	if g.head != "" {
		k := copy(p, g.head)
		g.head = g.head[k:]
		return k, nil
	}
	if g.n <= 1 {
		g.once.Do(func() { close(g.reached); <-g.release })
		return 0, io.ErrUnexpectedEOF
	}
	k := min(len(p), g.n-1)
	for i := range p[:k] {
		p[i] = 'x'
	}
	g.n -= k
	return k, nil
}

// TestBodiesInFlightCapped: request bodies held at once across keys are
// capped: while one key's 900 KiB body is held (1 MiB of 1.1), another's
// 200 KiB is answered 429 with Retry-After; once it is released, taken.
func TestBodiesInFlightCapped(t *testing.T) {
	t.Parallel()
	r := newRigWith(t, rigOpts{cfg: func(c *gateway.Config) { c.MaxBody = 1 << 20; c.MaxBodyBytesInFlight = 1<<20 + 100<<10 }})
	a, _ := r.key(t, gateway.Spec{Name: "a", Tier: "paid"})
	b, _ := r.key(t, gateway.Spec{Name: "b", Tier: "paid"})
	g := &gated{head: `{"model":"` + r.model + `","x":"`, n: 900 << 10, reached: make(chan struct{}), release: make(chan struct{})}
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", g)
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+a)
	held := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { r.handler.ServeHTTP(held, req); close(done) }()
	<-g.reached

	body := `{"model":"` + r.model + `","messages":[{"role":"user","content":"` + strings.Repeat("hello ", 200<<10/6) + `"}]}`
	res, err := r.post(context.Background(), b, body, nil)
	if err != nil {
		t.Fatal(err)
	}
	var e apiErr
	jsonDecode(res, &e)
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" || e.Error.Code == nil || *e.Error.Code != "bodies_in_flight" {
		t.Fatalf("a body past the bytes in flight: %d %+v (Retry-After %q), want 429 bodies_in_flight with Retry-After", res.StatusCode, e, res.Header.Get("Retry-After"))
	}
	close(g.release)
	<-done
	res, err = r.post(context.Background(), b, body, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("the same body once the first was released: %d %s, want 200", res.StatusCode, b)
	}
}
