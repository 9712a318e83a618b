package demo

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/harness"
)

// TestDemo runs the demo as a newcomer would (default logging) while a
// headless browser opens a pull request's page: the page shows the
// summary comment, a review with line comments on their diff lines and a
// chat reply; the console shows no WARN line, the pages' address and a
// final summary. With PRQ_DEMO_SCREENSHOT set, the browser also saves a
// screenshot of the page there (docs/demo-pull-request.png is one).
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a demo for several seconds")
	}
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var fl config.Flags
	fl.Register(fs)
	var d Flags
	d.Register(fs)
	if err := fs.Parse([]string{"--addr", addr, "--duration", "5m", "--rate", "2", "--chat-rate", "1"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(func(string) string { return "" }, &fl)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr harness.SyncBuffer
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, d, &stdout, &stderr) }()

	pages := regexp.MustCompile(`as GitHub shows it: (http://\S+)`)
	var index string
	until(t, "the demo printed the pages' address", func() bool {
		m := pages.FindStringSubmatch(stdout.String())
		if m != nil {
			index = m[1]
		}
		return m != nil
	}, &stdout)
	// a pull request with the summary, a chat question and its reply
	// (three comments) and a review's line comments
	row := regexp.MustCompile(`<a href="(/_fake/pulls/[^"]+)">[^<]+</a></td><td>[^<]*</td><td>\d+</td><td>([3-9]|\d\d+)</td><td>[1-9]\d*</td>`)
	var pr string
	until(t, "a pull request with a summary, a review and a chat reply", func() bool {
		if m := row.FindStringSubmatch(fetch(index)); m != nil {
			pr = strings.TrimSuffix(index, "/_fake/pulls") + m[1]
		}
		return pr != ""
	}, &stdout)
	t.Run("browser", func(t *testing.T) { checkPage(t, pr) })
	// the dashboard links its pull requests in progress to their pages
	link := regexp.MustCompile(`"link":"` + regexp.QuoteMeta(index) + `/tenant-\d+/[^/"]+/\d+"`)
	until(t, "a dashboard pull-request row linking to its page", func() bool {
		return link.MatchString(fetch("http://" + addr + "/api/dashboard"))
	}, &stdout)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("demo: %v", err)
	}
	if strings.Contains(stderr.String(), "level=WARN") || strings.Contains(stderr.String(), "level=INFO") {
		t.Errorf("the demo's console is not quiet:\n%s", stderr.String())
	}
	for _, want := range []string{"prq: dashboard http://" + addr, "prq demo: ran ", "pull requests", "provider calls", "spend", "where to look"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, stdout.String())
		}
	}
}

// checkPage loads a pull request's page in headless Chromium.
func checkPage(t *testing.T, url string) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is required under CI (.ci/run installs Debian's chromium)")
		}
		t.Skip("chromium not installed: skipping the browser check (apt-get install chromium)")
	}
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic", "--user-data-dir=" + t.TempDir()}
	cmd := exec.Command(chromium, append(args, "--dump-dom", url)...)
	var dom bytes.Buffer
	cmd.Stdout = &dom
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v", url, err)
	}
	page := dom.String()
	for what, re := range map[string]string{
		"the summary comment":                 `<h2>prq summary</h2>`,
		"a review":                            `<div class="box review"`,
		"a line comment below its diff lines": `(?s)<table class="diff">(<tbody>)?<tr class="(add|del|)"><td class="n">\d*</td><td class="n">\d*</td>.*?</table>\s*<div class="linecomment">`,
		"a chat question and prq's reply":     `<b>dev-\d+</b> commented</div><div class="body markdown"[^>]*><p>@prq-demo could you explain[\s\S]*<b>prq-demo\[bot\]</b><span class="bot">`,
		"the check run's history":             `<ol class="history"><li>`,
	} {
		if !regexp.MustCompile(re).MatchString(page) {
			t.Errorf("the page shows no %s (%s):\n%.3000s", what, re, page)
		}
	}
	if shot := os.Getenv("PRQ_DEMO_SCREENSHOT"); shot != "" {
		cmd := exec.Command(chromium, append(args, "--hide-scrollbars", "--window-size=1000,1600", "--screenshot="+shot, url)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("chromium --screenshot: %v\n%s", err, out)
		}
	}
}

func fetch(url string) string {
	res, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// until waits for ok, failing after 3 minutes (a deadline, not a
// measurement: the demo is slow on a busy machine).
func until(t *testing.T, what string, ok func() bool, out *harness.SyncBuffer) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); !ok(); time.Sleep(250 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 3 minutes; output:\n%s", what, out.String())
		}
	}
}
