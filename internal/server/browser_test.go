package server

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/jobs"
)

func chromiumOrSkip(t *testing.T) string {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is required under CI (.ci/run installs Debian's chromium)")
		}
		t.Skip("chromium not installed: skipping the browser test (apt-get install chromium)")
	}
	return chromium
}

// visit loads url in headless Chromium and lets its scripts run.
func visit(t *testing.T, chromium, url string) string {
	t.Helper()
	cmd := exec.Command(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic", "--user-data-dir="+t.TempDir(),
		"--virtual-time-budget=5000", "--dump-dom", url)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", url, err, stderr.String())
	}
	return stdout.String()
}

// arrivals records the state-changing requests that reach serve and
// what serve answered: proof that the browser did send them.
type arrivals struct {
	mu   sync.Mutex
	seen []string
}

func (a *arrivals) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if safeMethod(r.Method) {
			h.ServeHTTP(w, r)
			return
		}
		rec := &statusRecorder{ResponseWriter: w, code: 200}
		h.ServeHTTP(rec, r)
		a.mu.Lock()
		a.seen = append(a.seen, fmt.Sprintf("%s %s origin=%q -> %d", r.Method, r.URL.Path, r.Header.Get("Origin"), rec.code))
		a.mu.Unlock()
	})
}

func (a *arrivals) list() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) { s.code = code; s.ResponseWriter.WriteHeader(code) }

// TestCrossSiteRequestsChangeNothingInBrowser runs serve's routes as the
// demo does without a token (no credentials needed at all: the worst
// case, equal to a browser with the admin's credentials cached) with
// admin.ui_writes on, and loads a page of ANOTHER origin in headless
// Chromium that auto-submits a form to the asynq web UI's pause endpoint
// and fires fetches at it and at the admin API. Nothing changes: no
// queue paused, no plan changed. Then a page of serve's own origin that
// loads prq's CSRF script pauses a queue the way the asynq UI does (an
// XMLHttpRequest): the UI's own writes still work.
func TestCrossSiteRequestsChangeNothingInBrowser(t *testing.T) {
	chromium := chromiumOrSkip(t)
	s, _ := newTestServer(t, func(c *config.Config) { c.Admin.UIWrites = true })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h, closeMon, err := s.handler(ctx, nil, true, "")
	if err != nil {
		t.Fatal(err)
	}
	defer closeMon()
	var seen arrivals
	mux := http.NewServeMux()
	mux.Handle("/", h)
	// serve's own origin: a page like the asynq UI's, under the same headers
	mux.Handle("GET /test/same-origin", securityHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<!doctype html><html><head><script src="/ui/csrf.js"></script><script src="/test/same-origin.js"></script></head><body><p id="out">waiting</p></body></html>`)
	})))
	mux.Handle("GET /test/same-origin.js", securityHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, `var x = new XMLHttpRequest(); x.open("POST", "/monitoring/api/queues/trial:pause");
x.onload = function () { document.getElementById("out").textContent = "status " + x.status; }; x.send();`)
	})))
	serve := httptest.NewServer(seen.wrap(mux))
	defer serve.Close()
	for _, q := range jobs.Queues {
		if _, err := s.client.Enqueue(probeTask(), queueOpt(q)); err != nil {
			t.Fatal(err)
		}
	}
	const inst = 4242
	target := serve.URL
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><html><body>
<form id="f" method="POST" action="%[1]s/monitoring/api/queues/paid:pause" enctype="text/plain"><input name="a" value="b"></form>
<form id="g" method="POST" action="%[1]s/api/plans/%[2]d"><input name="tier" value="paid"></form>
<iframe name="sink"></iframe>
<script>
fetch("%[1]s/monitoring/api/queues/free:pause", {method: "POST", mode: "no-cors", credentials: "include"}).catch(function () {});
fetch("%[1]s/monitoring/api/queues/chat:pause", {method: "POST", credentials: "include", headers: {"X-PRQ-CSRF": "1"}}).catch(function () {});
fetch("%[1]s/api/plans/%[2]d", {method: "PUT", credentials: "include", headers: {"Content-Type": "application/json", "X-PRQ-CSRF": "1"},
  body: JSON.stringify({tier: "paid", reason: "csrf"})}).catch(function () {});
document.getElementById("g").target = "sink"; document.getElementById("g").submit();
setTimeout(function () { document.getElementById("f").submit(); }, 500);
</script></body></html>`, target, inst)
	}))
	defer attacker.Close()
	// another origin: localhost, not 127.0.0.1, and another port
	page := strings.Replace(attacker.URL, "127.0.0.1", "localhost", 1) + "/"
	visit(t, chromium, page)

	arrived := seen.list()
	t.Logf("cross-site requests that reached serve: %q", arrived)
	var formPause bool
	for _, a := range arrived {
		if strings.HasPrefix(a, "POST /monitoring/api/queues/paid:pause") {
			formPause = true
		}
		if !strings.HasSuffix(a, "-> 403") && !strings.HasSuffix(a, "-> 405") {
			t.Errorf("a cross-site request was not refused: %s", a)
		}
	}
	if !formPause {
		t.Fatal("the browser never submitted the cross-site form: the test proves nothing")
	}
	for _, q := range jobs.Queues {
		info, err := s.insp.GetQueueInfo(q)
		if err != nil {
			t.Fatal(err)
		}
		if info.Paused {
			t.Errorf("a page on another origin paused the %s queue", q)
		}
	}
	p, err := s.store.GetPlan(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	if p.Explicit || p.Tier == jobs.TierPaid {
		t.Errorf("a page on another origin changed installation %d's plan: %+v", inst, p)
	}

	// the UI's own way of writing, from serve's origin, still works
	dom := visit(t, chromium, serve.URL+"/test/same-origin")
	info, err := s.insp.GetQueueInfo("trial")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Paused || !strings.Contains(dom, "status 204") {
		t.Fatalf("a same-origin XMLHttpRequest with prq's script could not pause the trial queue (paused %v); page: %.300s; requests: %q",
			info.Paused, dom, seen.list())
	}

}
