package server

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/gateway"
	"github.com/prq-dev/prq/jobs"
)

const testToken = "3f9c1e0b7a5d42c8e6f1a9b0c7d2e4f6"

// startHTTP serves s's routes (open: the demo without a token).
func startHTTP(t *testing.T, s *Server, open bool) *httptest.Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h, closeMon, err := s.handler(ctx, nil, open, "")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(func() { ts.Close(); closeMon(); cancel() })
	return ts
}

func do(t *testing.T, method, url string, set func(*http.Request), body string) (int, string, http.Header) {
	t.Helper()
	r, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if set != nil {
		set(r)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestSecurityHeadersOnEveryPage(t *testing.T) {
	s, _ := newTestServer(t, func(c *config.Config) { c.Admin.Token = testToken })
	ts := startHTTP(t, s, false)
	auth := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testToken) }
	for _, path := range []string{"/", "/dashboard.js", "/api/dashboard", "/api/plans", "/monitoring/", "/monitoring/queues/paid",
		"/monitoring/api/queues", "/ui/csrf.js", "/metrics", "/healthz", "/nope"} {
		t.Run(path, func(t *testing.T) {
			_, body, h := do(t, "GET", ts.URL+path, auth, "")
			csp := h.Get("Content-Security-Policy")
			for _, want := range []string{"frame-ancestors 'none'", "default-src 'self'", "object-src 'none'", "base-uri 'none'"} {
				if !strings.Contains(csp, want) {
					t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
				}
			}
			if strings.Contains(csp, "script-src 'self' 'unsafe-inline'") || strings.Contains(csp, "unsafe-eval") {
				t.Errorf("the policy allows inline or eval'd script: %q", csp)
			}
			for name, want := range map[string]string{"X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin", "X-Frame-Options": "DENY"} {
				if got := h.Get(name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
			if !strings.Contains(h.Get("Content-Type"), "html") {
				return
			}
			// every inline script of an HTML page is allowed by its hash,
			// and the dashboard has none
			for _, m := range regexp.MustCompile(`(?s)<script>(.*?)</script>`).FindAllStringSubmatch(body, -1) {
				if path == "/" {
					t.Fatalf("the dashboard has an inline script")
				}
				sum := sha256.Sum256([]byte(m[1]))
				if !strings.Contains(csp, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'") {
					t.Errorf("an inline script of %s is not allowed by the policy", path)
				}
			}
			if strings.HasPrefix(path, "/monitoring/") && !strings.Contains(body, `<script src="/ui/csrf.js">`) {
				t.Errorf("the asynq web UI page does not load prq's CSRF script")
			}
		})
	}
}

// TestStateChangesNeedSameOrigin drives the admin API and the asynq web
// UI with the requests a cross-site page can make (and some it cannot);
// only same-origin requests with the header, or bearer-token clients,
// change anything.
func TestStateChangesNeedSameOrigin(t *testing.T) {
	s, _ := newTestServer(t, func(c *config.Config) { c.Admin.Token = testToken; c.Admin.UIWrites = true })
	ts := startHTTP(t, s, false)
	host := strings.TrimPrefix(ts.URL, "http://")
	basic := func(r *http.Request) { r.SetBasicAuth("admin", testToken) } // what a browser resends by itself
	with := func(hdr ...string) func(*http.Request) {
		return func(r *http.Request) {
			basic(r)
			for i := 0; i+1 < len(hdr); i += 2 {
				r.Header.Set(hdr[i], hdr[i+1])
			}
		}
	}
	tests := []struct {
		name string
		set  func(*http.Request)
		want int
	}{
		{"cross-site form (Origin of another site)", with("Origin", "http://evil.example"), 403},
		{"cross-site with the header (cannot happen without CORS, still refused)", with("Origin", "http://evil.example", CSRFHeader, "1"), 403},
		{"sandboxed or no-referrer page (Origin null)", with("Origin", "null", CSRFHeader, "1"), 403},
		{"another port of the same host", with("Origin", "http://127.0.0.1:1", CSRFHeader, "1"), 403},
		{"Referer of another site, no Origin", with("Referer", "http://evil.example/x", CSRFHeader, "1"), 403},
		{"same origin without the header", with("Origin", "http://"+host), 403},
		{"no Origin, no header (a bare form post)", with(), 403},
		{"same origin with the header (prq's pages)", with("Origin", "http://"+host, CSRFHeader, "1"), 200},
		{"same Referer with the header", with("Referer", "http://"+host+"/monitoring/", CSRFHeader, "1"), 200},
		{"bearer token, no Origin (curl, scripts)", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testToken) }, 200},
	}
	ctx := context.Background()
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inst := int64(100 + i)
			code, body, _ := do(t, "PUT", ts.URL+"/api/plans/"+itoa(inst), tt.set, `{"tier":"paid","reason":"csrf"}`)
			p, err := s.store.GetPlan(ctx, inst)
			if err != nil {
				t.Fatal(err)
			}
			if code != tt.want || (p.Tier == jobs.TierPaid) != (tt.want == 200) {
				t.Fatalf("PUT /api/plans: %d (%s), plan tier %s; want %d", code, strings.TrimSpace(body), p.Tier, tt.want)
			}
			q := []string{"chat", "paid", "trial", "free"}[i%4]
			s.insp.UnpauseQueue(q)
			if _, err := s.client.Enqueue(probeTask(), queueOpt(q)); err != nil {
				t.Fatal(err)
			}
			code, body, _ = do(t, "POST", ts.URL+"/monitoring/api/queues/"+q+":pause", tt.set, "")
			info, err := s.insp.GetQueueInfo(q)
			if err != nil {
				t.Fatal(err)
			}
			if (code < 300) != (tt.want == 200) || info.Paused != (tt.want == 200) {
				t.Fatalf("pause %s: %d (%s), paused %v; want %d", q, code, strings.TrimSpace(body), info.Paused, tt.want)
			}
		})
	}
}

// TestAsynqUIReadOnlyByDefault: without admin.ui_writes nothing the
// asynq web UI offers changes state, whoever asks.
func TestAsynqUIReadOnlyByDefault(t *testing.T) {
	s, _ := newTestServer(t, func(c *config.Config) { c.Admin.Token = testToken })
	ts := startHTTP(t, s, false)
	if _, err := s.client.Enqueue(probeTask(), queueOpt("paid")); err != nil {
		t.Fatal(err)
	}
	bearer := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testToken) }
	for _, req := range [][2]string{{"POST", "/monitoring/api/queues/paid:pause"}, {"DELETE", "/monitoring/api/queues/paid"},
		{"POST", "/monitoring/api/queues/paid/scheduled_tasks:run_all"}, {"DELETE", "/monitoring/api/queues/paid/scheduled_tasks:delete_all"}} {
		code, _, _ := do(t, req[0], ts.URL+req[1], bearer, "")
		if code != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: %d, want 405", req[0], req[1], code)
		}
	}
	info, err := s.insp.GetQueueInfo("paid")
	if err != nil {
		t.Fatal(err)
	}
	if info.Paused || info.Size != 1 {
		t.Fatalf("the read-only UI changed the queue: paused %v, %d tasks", info.Paused, info.Size)
	}
	if code, body, _ := do(t, "GET", ts.URL+"/monitoring/api/queues", bearer, ""); code != 200 || !strings.Contains(body, "paid") {
		t.Fatalf("reading the queues: %d %s", code, body)
	}
}

func TestMetricsRequireToken(t *testing.T) {
	for _, require := range []bool{false, true} {
		s, _ := newTestServer(t, func(c *config.Config) { c.Admin.Token = testToken; c.Metrics.RequireToken = require })
		ts := startHTTP(t, s, false)
		code, _, _ := do(t, "GET", ts.URL+"/metrics", nil, "")
		if want := map[bool]int{false: 200, true: 401}[require]; code != want {
			t.Fatalf("require_token %v: /metrics without a token: %d, want %d", require, code, want)
		}
		code, _, _ = do(t, "GET", ts.URL+"/metrics", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testToken) }, "")
		if code != 200 {
			t.Fatalf("require_token %v: /metrics with the token: %d", require, code)
		}
	}
}

// TestDemoRefusesReboundHost: the demo without a token serves its admin
// API only for loopback names, so a page whose DNS name is rebound to
// 127.0.0.1 (its own name as Host, and as Origin, which then passes the
// same-origin check) cannot create a key or change a plan.
func TestDemoRefusesReboundHost(t *testing.T) {
	s, _ := newTestServer(t, nil)
	ts := startHTTP(t, s, true)
	port := ts.URL[strings.LastIndex(ts.URL, ":")+1:]
	for _, tt := range []struct {
		host string
		want int
	}{{"evil.example:" + port, 403}, {"127.0.0.1:" + port, 201}, {"localhost:" + port, 201}} {
		set := func(r *http.Request) {
			r.Host = tt.host
			r.Header.Set("Origin", "http://"+tt.host)
			r.Header.Set(CSRFHeader, "1")
		}
		code, body, _ := do(t, "POST", ts.URL+"/api/keys", set, `{"name":"`+tt.host+`"}`) // names are unique
		if code != tt.want || (code == 403 && strings.Contains(body, "prq-sk-")) {
			t.Fatalf("Host %s: %d %s, want %d", tt.host, code, body, tt.want)
		}
		code, _, _ = do(t, "PUT", ts.URL+"/api/plans/7", set, `{"tier":"paid","reason":"rebound"}`)
		if want := map[int]int{403: 403, 201: 200}[tt.want]; code != want {
			t.Fatalf("Host %s: PUT /api/plans: %d, want %d", tt.host, code, want)
		}
	}
	keys, err := gateway.NewKeys(s.rdb).List(context.Background())
	if err != nil || len(keys) != 2 {
		t.Fatalf("%d keys (%v), want the two made from loopback names", len(keys), err)
	}
}
