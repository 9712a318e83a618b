package webhook_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prq-dev/prq/webhook"
)

// gatedReader yields n bytes of x: all but the last freely, then it
// announces that and blocks until released, so a test knows the handler
// holds the budget for the bytes that arrived.
type gatedReader struct {
	n       int
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func newGated(n int) *gatedReader {
	return &gatedReader{n: n, started: make(chan struct{}), release: make(chan struct{})}
}

func (g *gatedReader) Read(p []byte) (int, error) {
	if g.n == 1 {
		g.once.Do(func() { close(g.started); <-g.release })
	}
	if g.n == 0 {
		return 0, io.EOF
	}
	k := min(len(p), g.n-1)
	if g.n == 1 {
		k = 1
	}
	for i := range p[:k] {
		p[i] = 'x'
	}
	g.n -= k
	return k, nil
}

func intakeHandler(t testing.TB, maxBytes, inFlight int64) *webhook.Handler {
	t.Helper()
	h, err := webhook.New(webhook.Config{Secret: secret, AppSlug: "prq-bot", MaxBytes: maxBytes, MaxInFlightBytes: inFlight},
		&recorder{}, &recorder{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestIntakeBudgetRefusesWhenFull(t *testing.T) {
	for _, tc := range []struct {
		name    string
		chunked bool
	}{{"content-length", false}, {"chunked", true}} {
		t.Run(tc.name, func(t *testing.T) {
			h := intakeHandler(t, 1<<20, 3<<19) // 1 MiB bodies, 1.5 MiB in flight
			g := newGated(1 << 20)
			req := httptest.NewRequest(http.MethodPost, "/webhook", g)
			req.ContentLength = 1 << 20
			if tc.chunked {
				req.ContentLength = -1
				g.n = 900 << 10
			}
			req.Header.Set("X-GitHub-Event", "ping")
			req.Header.Set("X-GitHub-Delivery", "d-1")
			first := httptest.NewRecorder()
			done := make(chan struct{})
			go func() { h.ServeHTTP(first, req); close(done) }()
			<-g.started

			// The first body holds 1 MiB (or its first chunk, then grows):
			// for the content-length case a second 1 MiB body cannot fit.
			body := []byte(`{"zen":"x","hook_id":1}`)
			if !tc.chunked {
				big := bytes.Repeat([]byte("y"), 1<<20)
				w := send(h, "ping", "d-2", big, nil)
				if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
					t.Fatalf("second body while the budget is held: %d %q (Retry-After %q), want 503 with Retry-After", w.Code, w.Body, w.Header().Get("Retry-After"))
				}
			}
			close(g.release)
			<-done
			if first.Code != http.StatusUnauthorized {
				t.Fatalf("unsigned body: %d %s, want 401", first.Code, first.Body)
			}
			// The budget is back: a signed delivery is taken.
			if w := send(h, "ping", "d-3", body, nil); w.Code >= 300 {
				t.Fatalf("signed ping after the flood: %d %s", w.Code, w.Body)
			}
			big := bytes.Repeat([]byte("y"), 1<<20)
			if w := send(h, "ping", "d-4", big, nil); w.Code == http.StatusServiceUnavailable {
				t.Fatalf("a full-size body after the flood was refused as busy: the budget leaked")
			}
		})
	}
}

// failReader fails the test if the handler reads a body it should refuse
// from its headers alone.
type failReader struct{ t *testing.T }

func (f failReader) Read([]byte) (int, error) {
	f.t.Error("body read although Content-Length was over the cap")
	return 0, io.EOF
}

func TestIntakeRefusesDeclaredOversize(t *testing.T) {
	h := intakeHandler(t, 1<<20, 0)
	req := httptest.NewRequest(http.MethodPost, "/webhook", failReader{t})
	req.ContentLength = 2 << 20
	req.Header.Set("X-GitHub-Event", "ping")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("got %d, want 413", w.Code)
	}
}

func TestIntakeChunkedBodyVerifies(t *testing.T) {
	h := intakeHandler(t, 1<<20, 0)
	body := []byte(`{"zen":"` + strings.Repeat("z", 300<<10) + `","hook_id":1}`)
	req := httptest.NewRequest(http.MethodPost, "/webhook", io.MultiReader(bytes.NewReader(body)))
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "ping")
	req.Header.Set("X-GitHub-Delivery", "d-c")
	req.Header.Set("X-Hub-Signature-256", webhook.Sign(secret, body))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code >= 300 {
		t.Fatalf("chunked signed ping: %d %s", w.Code, w.Body)
	}
	// Over the cap while chunked: 413, not a partial read.
	req = httptest.NewRequest(http.MethodPost, "/webhook", bytes.NewReader(bytes.Repeat([]byte("x"), 1<<20+10)))
	req.ContentLength = -1
	req.Header.Set("X-GitHub-Event", "ping")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked oversize: %d, want 413", w.Code)
	}
}

// The flood benchmark runs the receiver in a child process (this test
// binary, re-executed) so its peak RSS (VmHWM) is the receiver's own.
const childEnv = "PRQ_WEBHOOK_INTAKE_CHILD"

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		inFlight, _ := strconv.ParseInt(v, 10, 64)
		runIntakeChild(inFlight)
		return
	}
	os.Exit(m.Run())
}

func runIntakeChild(inFlight int64) {
	h, err := webhook.New(webhook.Config{Secret: secret, MaxInFlightBytes: inFlight}, &recorder{}, &recorder{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := httptest.NewServer(h)
	fmt.Println(srv.URL)
	io.Copy(io.Discard, os.Stdin) // until the parent closes stdin
	srv.Close()
}

func vmKB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return n
		}
	}
	return -1
}

// BenchmarkIntakeFlood posts 32 concurrent 25 MB unsigned bodies, b.N
// rounds, at a receiver with the default in-flight budget and at one
// with the budget effectively off (what prq did before), and reports
// each child's peak RSS.
//
//	go test -run '^$' -bench IntakeFlood -benchtime 3x ./webhook
func BenchmarkIntakeFlood(b *testing.B) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		b.Skip("needs /proc to read the receiver's peak RSS")
	}
	body := bytes.Repeat([]byte("x"), 25<<20)
	for _, tc := range []struct {
		name     string
		inFlight int64
	}{{"budget=default", 0}, {"budget=off", 1 << 40}} {
		b.Run(tc.name, func(b *testing.B) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			// 0 leaves webhook.New's default.
			cmd.Env = append(os.Environ(), childEnv+"="+strconv.FormatInt(tc.inFlight, 10))
			stdin, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() { stdin.Close(); cmd.Wait() }()
			url, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				b.Fatal(err)
			}
			url = strings.TrimSpace(url) + "/webhook"
			base := vmKB(cmd.Process.Pid, "VmRSS")
			codes := map[int]int{}
			var mu sync.Mutex
			client := &http.Client{Timeout: time.Minute}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var wg sync.WaitGroup
				for j := 0; j < 32; j++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
						req.Header.Set("X-GitHub-Event", "push")
						req.Header.Set("X-GitHub-Delivery", "flood")
						resp, err := client.Do(req)
						code := -1
						if err == nil {
							code = resp.StatusCode
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
						mu.Lock()
						codes[code]++
						mu.Unlock()
					}()
				}
				wg.Wait()
			}
			b.StopTimer()
			peak := vmKB(cmd.Process.Pid, "VmHWM")
			b.ReportMetric(float64(base)/1024, "base-RSS-MB")
			b.ReportMetric(float64(peak)/1024, "peak-RSS-MB")
			b.Logf("%s: RSS %d MB before, peak %d MB; answers %v", tc.name, base/1024, peak/1024, codes)
		})
	}
}

// TestBusyFloodLoggedOnce: a flood of deliveries refused for the
// in-flight budget is logged once per interval with how many, not a line
// each; every refusal is counted (Count, the delivery metric).
func TestBusyFloodLoggedOnce(t *testing.T) {
	var logs bytes.Buffer
	h, err := webhook.New(webhook.Config{Secret: secret, AppSlug: "prq-bot", MaxBytes: 1 << 20, MaxInFlightBytes: 3 << 19},
		&recorder{}, &recorder{}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	busy := 0
	h.Count = func(event, outcome string) {
		if outcome == "busy" {
			busy++
		}
	}
	g := newGated(1 << 20)
	req := httptest.NewRequest(http.MethodPost, "/webhook", g)
	req.ContentLength = 1 << 20
	req.Header.Set("X-GitHub-Event", "ping")
	req.Header.Set("X-GitHub-Delivery", "d-held")
	done := make(chan struct{})
	go func() { h.ServeHTTP(httptest.NewRecorder(), req); close(done) }()
	<-g.started
	big := bytes.Repeat([]byte("y"), 1<<20)
	for i := range 50 {
		if w := send(h, "ping", fmt.Sprintf("d-%d", i), big, nil); w.Code != http.StatusServiceUnavailable {
			t.Fatalf("delivery %d: %d, want 503 busy", i, w.Code)
		}
	}
	close(g.release)
	<-done
	if busy != 50 {
		t.Fatalf("%d busy refusals counted, want 50", busy)
	}
	if n := strings.Count(logs.String(), "webhook busy"); n != 1 || strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("%d busy lines for 50 refusals (want 1, not an ERROR each):\n%s", n, logs.String())
	}
}

// signalBody announces its first Read, which comes after the handler
// took from the budget whatever it takes before the body arrives.
type signalBody struct {
	io.ReadCloser
	once sync.Once
	read chan struct{}
}

func (s *signalBody) Read(p []byte) (int, error) {
	s.once.Do(func() { close(s.read) })
	return s.ReadCloser.Read(p)
}

// TestIntakeHoldByDeclaringPeers: two unauthenticated connections that
// declare 15,204,352-byte bodies (together the whole default in-flight
// budget) and send one byte hold nothing a signed delivery needs: 25
// signed deliveries sent while they stay open are all taken.
func TestIntakeHoldByDeclaringPeers(t *testing.T) {
	h, err := webhook.New(webhook.Config{Secret: secret}, &recorder{}, &recorder{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	holding := make(chan struct{}, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-GitHub-Delivery") == "hold" {
			sb := &signalBody{ReadCloser: r.Body, read: make(chan struct{})}
			r.Body = sb
			go func() { <-sb.read; holding <- struct{}{} }()
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	const declared = 15_204_352 // (25 MiB + 4 MiB) / 2
	for range 2 {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-GitHub-Event: push\r\n"+
			"X-GitHub-Delivery: hold\r\nContent-Length: %d\r\n\r\n{", declared)
	}
	<-holding
	<-holding
	body := []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`)
	codes := map[int]int{}
	for i := range 25 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/webhook", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "ping")
		req.Header.Set("X-GitHub-Delivery", fmt.Sprintf("signed-%d", i))
		req.Header.Set("X-Hub-Signature-256", webhook.Sign(secret, body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	if codes[http.StatusOK] != 25 {
		t.Fatalf("signed deliveries while two peers hold declared %d-byte bodies: answers %v, want 25 x 200", declared, codes)
	}
}

// TestRefusalLogBounded: 20 unsigned requests with a 900 KB
// X-GitHub-Delivery grow the log by a line or so, not by 19 MB; signed
// refusals are logged each, with their fields cut.
func TestRefusalLogBounded(t *testing.T) {
	var logs bytes.Buffer
	rec := &recorder{}
	h, err := webhook.New(webhook.Config{Secret: secret}, rec, rec, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat("d", 900<<10)
	for range 20 {
		w := send(h, "ping", huge, []byte(`{}`), func(r *http.Request) { r.Header.Set("X-Hub-Signature-256", "sha256=00") })
		if w.Code != http.StatusUnauthorized {
			t.Fatalf("unsigned: %d, want 401", w.Code)
		}
	}
	if logs.Len() >= 200<<10 || strings.Count(logs.String(), "webhook refused unsigned") != 1 {
		t.Fatalf("20 unsigned requests with 900 KB headers logged %d bytes (want < 200 KB, one line):\n%.2000s", logs.Len(), logs.String())
	}
	logs.Reset()
	for range 3 {
		if w := send(h, "pull_request", huge, []byte(`{}`), nil); w.Code != http.StatusBadRequest {
			t.Fatalf("signed, huge delivery id: %d, want 400", w.Code)
		}
	}
	if n := strings.Count(logs.String(), "webhook refused"); n != 3 || logs.Len() > 3*1024 {
		t.Fatalf("3 signed refusals: %d lines, %d bytes; want 3 lines of bounded fields:\n%.2000s", n, logs.Len(), logs.String())
	}
}
