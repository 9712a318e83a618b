package main

import (
	"bytes"
	"context"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/prq-dev/prq/fake/fakegithub"
)

// lineWriter is stderr that hands each line written to a channel.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line)
			return len(p), nil
		}
		w.lines <- line
	}
}

// TestSetupGitHub: prq setup github against the fake GitHub prints the
// page to open, then what it registered and the install link, and
// never a secret; the flags reach the flow (organisation, files).
func TestSetupGitHub(t *testing.T) {
	srv := httptest.NewServer(fakegithub.New(fakegithub.Config{}))
	defer srv.Close()
	dir := t.TempDir()
	envFile, keyFile := filepath.Join(dir, "prq.env"), filepath.Join(dir, "keys", "app.pem")
	var stdout bytes.Buffer
	stderr := &lineWriter{lines: make(chan string, 16)}
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), []string{"setup", "github", "--webhook-url", "https://prq.acme.example/webhook", "--name", "prq for acme",
			"--org", "acme", "--github-url", srv.URL, "--env-file", envFile, "--key-file", keyFile}, func(string) string { return "" }, &stdout, stderr)
	}()
	page := regexp.MustCompile(`^Open (http://127\.0\.0\.1:\d+/) in a browser`).FindStringSubmatch(<-stderr.lines)
	if page == nil {
		t.Fatal("stderr does not start with the page to open")
	}
	resp, err := http.Get(page[1])
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	action := regexp.MustCompile(`action="([^"]*)"`).FindSubmatch(b)
	manifest := regexp.MustCompile(`name="manifest" value="([^"]*)"`).FindSubmatch(b)
	if action == nil || manifest == nil {
		t.Fatalf("the page has no manifest form: %s", b)
	}
	resp, err = http.PostForm(html.UnescapeString(string(action[1])), url.Values{"manifest": {html.UnescapeString(string(manifest[1]))}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := <-done; err != nil {
		t.Fatalf("prq setup github: %v", err)
	}
	out := stdout.String()
	for _, want := range []string{`Registered the GitHub App "prq for acme"`, "slug prq-for-acme, owner acme", "Wrote " + envFile,
		"GITHUB_PRIVATE_KEY_PATH=" + keyFile, srv.URL + "/apps/prq-for-acme/installations/new\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	envText, _ := os.ReadFile(envFile)
	key, _ := os.ReadFile(keyFile)
	secret := regexp.MustCompile(`GITHUB_WEBHOOK_SECRET=(\S+)`).FindSubmatch(envText)
	if secret == nil || len(key) == 0 {
		t.Fatalf("env file %s, key %d bytes: want the webhook secret and the key", envText, len(key))
	}
	stderr.mu.Lock()
	printed := out + stderr.buf.String()
	stderr.mu.Unlock()
	if strings.Contains(printed, string(secret[1])) || strings.Contains(printed, "PRIVATE KEY") {
		t.Error("a secret was printed")
	}
}

// TestSetupUsage: mistakes on the command line are usage errors (exit
// 2), found before anything is served.
func TestSetupUsage(t *testing.T) {
	for _, args := range [][]string{
		{"setup"},
		{"setup", "gitlab"},
		{"setup", "github"},
		{"setup", "github", "--webhook-url", "prq.example.com"},
		{"setup", "github", "--webhook-url", "https://h.example", "--port", "70000"},
		{"setup", "github", "--webhook-url", "https://h.example", "extra"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, func(string) string { return "" }, &stdout, &stderr)
		if err == nil || exitCode(err) != 2 {
			t.Errorf("prq %s: %v, want a usage error", strings.Join(args, " "), err)
		}
	}
}
