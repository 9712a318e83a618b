package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/harness"
)

// TestDashboardInBrowser runs a short demo and loads the dashboard and the
// asynq web UI in headless Chromium: the charts must have data points and
// the web UI must list the four queues.
func TestDashboardInBrowser(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is required under CI (.ci/run installs Debian's chromium)")
		}
		t.Skip("chromium not installed: skipping the browser test (apt-get install chromium)")
	}
	if testing.Short() {
		t.Skip("runs a demo for several seconds")
	}
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out harness.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--addr", addr, "--duration", "60s", "--rate", "2", "--log-level", "warn"}, func(string) string { return "" }, &out, &out)
	}()
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _ := getNoAuth(base + "/healthz"); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo did not start:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(8 * time.Second) // let the sampler collect points and PRs flow
	dump := func(url string, budget int) string {
		cmd := exec.Command(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
			"--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic", "--user-data-dir="+t.TempDir(),
			"--virtual-time-budget="+strconv.Itoa(budget), "--dump-dom", url)
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium %s: %v", url, err)
		}
		return stdout.String()
	}
	page := dump(base+"/", 4000)
	points := regexp.MustCompile(`data-points="(\d+)"`).FindAllStringSubmatch(page, -1)
	if len(points) < 2 {
		t.Fatalf("the dashboard drew %d charts, want one per model:\n%.2000s", len(points), page)
	}
	for _, p := range points {
		if n, _ := strconv.Atoi(p[1]); n < 2 {
			t.Fatalf("a chart has %d data points", n)
		}
	}
	// each chart draws the limiter's guarantee beside the limit
	for _, series := range []string{"incoming", "admitted", "limit", "allowed"} {
		if n := strings.Count(page, `data-series="`+series+`"`); n != len(points) {
			t.Errorf("%d of %d charts draw the %s series", n, len(points), series)
		}
	}
	if !strings.Contains(page, "tokens let in before older work") {
		t.Errorf("the admission table's columns are not in plain words")
	}
	if !regexp.MustCompile(`<td>[0-9]+/[0-9]+</td>`).MatchString(page) && !bytes.Contains([]byte(page), []byte("none right now")) {
		t.Errorf("the PR table did not render")
	}
	if !bytes.Contains([]byte(page), []byte("prq keys create")) && !bytes.Contains([]byte(page), []byte("quota used")) {
		t.Errorf("the gateway keys table did not render")
	}
	mon := dump(base+"/monitoring/", 15000) // the UI loads two large scripts, then asks the API: slow on a busy machine
	for _, q := range []string{"chat", "paid", "trial", "free"} {
		if !regexp.MustCompile(`>` + q + `<`).MatchString(mon) {
			t.Errorf("the asynq web UI does not list the %s queue", q)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("demo: %v", err)
	}
}

func getNoAuth(url string) (int, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
