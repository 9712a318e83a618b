package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/harness"
	"github.com/prq-dev/prq/internal/redistest"
)

// TestDoctor runs prq doctor as a user would, against the fakes, a real
// Redis and a real prq serve: a healthy install passes, and a wrong App
// id or webhook secret fails by name with its fix and exit code 1.
func TestDoctor(t *testing.T) {
	cfg := config.Default()
	const apiKey = "sk-doctor-cmd-test-key"
	f, err := harness.StartFakes(&cfg, 1, apiKey, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	f.OpenAI.SetLatencyScale(0.01) // doctor's 1-token calls: their latency is not under test
	f.GitHub.AddInstallation(7, "acme")
	rdb := redistest.New(t, "--appendonly", "yes")
	env := map[string]string{
		"REDIS_URL": rdb.URL(), "GITHUB_APP_ID": "1", "GITHUB_PRIVATE_KEY": string(f.KeyPEM), "GITHUB_API_URL": f.GitHubURL,
		"OPENAI_BASE_URL": f.OpenAIURL, "OPENAI_API_KEY": apiKey, "GITHUB_WEBHOOK_SECRET": "doctor-secret-6f1e2a9b7c3d",
		"GITHUB_APP_SLUG": "prq-bot", "PRQ_ADMIN_TOKEN": "doctor-admin-token-8c2d4e6f",
	}
	getenv := func(k string) string { return env[k] }

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		var out harness.SyncBuffer // serve logs from its request goroutines
		served <- run(ctx, []string{"serve", "--addr", addr}, getenv, &out, &out)
	}()
	t.Cleanup(func() { cancel(); <-served })
	url := "http://" + addr
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("serve did not become ready")
		}
	}

	doctor := func(override map[string]string, args ...string) (string, error) {
		get := func(k string) string {
			if v, ok := override[k]; ok {
				return v
			}
			return env[k]
		}
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"doctor"}, args...), get, &out, &out)
		return out.String(), err
	}

	out, err := doctor(nil, "--url", url)
	if err != nil || !strings.Contains(out, "webhook secret") || !strings.Contains(out, "secrets match") {
		t.Fatalf("healthy install: %v\n%s", err, out)
	}
	if out, err := doctor(nil, "--only", "ready", "--url", url); err != nil || !strings.Contains(out, "serve ready") {
		t.Fatalf("--only ready: %v\n%s", err, out)
	}

	for _, c := range []struct {
		name     string
		override map[string]string
		check    string
	}{
		{"wrong App id", map[string]string{"GITHUB_APP_ID": "2"}, "FAIL  github app"},
		{"webhook secret mismatch", map[string]string{"GITHUB_WEBHOOK_SECRET": "not-the-one"}, "FAIL  webhook secret"},
	} {
		out, err := doctor(c.override, "--url", url)
		if err == nil || exitCode(err) != 1 || !strings.Contains(out, c.check) || !strings.Contains(out, "fix: ") {
			t.Errorf("%s: err %v, want exit 1 and %q with a fix:\n%s", c.name, err, c.check, out)
		}
		for _, s := range []string{apiKey, "doctor-secret-6f1e2a9b7c3d", "not-the-one"} {
			if strings.Contains(out, s) {
				t.Errorf("%s: output holds the secret %q", c.name, s)
			}
		}
	}
	// providers in PRQ_CONFIG: the OpenAI one is probed on its API, an
	// Anthropic one (the fake's Messages API) through prq's client
	yml := filepath.Join(t.TempDir(), "prq.yaml")
	root := strings.TrimSuffix(f.OpenAIURL, "/v1")
	if err := os.WriteFile(yml, []byte("providers:\n"+
		"  - {name: openai, kind: openai, base_url: "+f.OpenAIURL+", key_env: OPENAI_API_KEY}\n"+
		"  - {name: claude, kind: anthropic, base_url: "+root+", key_env: ANTHROPIC_API_KEY}\n"+
		"models:\n"+
		"  - {name: gpt-4o-mini, provider: claude, requests_per_minute: 500, tokens_per_minute: 200000, max_output_tokens: 512}\n"+
		"  - {name: gpt-4o, provider: openai, requests_per_minute: 500, tokens_per_minute: 30000}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withConfig := map[string]string{"PRQ_CONFIG": yml, "ANTHROPIC_API_KEY": apiKey, "OPENAI_BASE_URL": ""}
	if out, err := doctor(withConfig, "--url", url); err != nil || !strings.Contains(out, "provider claude model gpt-4o-mini") ||
		!strings.Contains(out, "provider model gpt-4o") {
		t.Fatalf("an Anthropic provider beside the OpenAI one: %v\n%s", err, out)
	}
	withConfig["ANTHROPIC_API_KEY"] = "sk-ant-not-the-key-5a7c"
	if out, err := doctor(withConfig, "--url", url); err == nil || !strings.Contains(out, "FAIL  provider claude model gpt-4o-mini") || strings.Contains(out, "sk-ant-not-the-key-5a7c") {
		t.Fatalf("a refused Anthropic key: %v\n%s", err, out)
	}
	if _, err := doctor(nil, "--only", "everything"); err == nil || exitCode(err) != 2 {
		t.Errorf("--only everything: want a usage error, got %v", err)
	}
}

// TestDoctorFailsWhatServeRefuses: each configuration serve refuses to
// start with, and a slug that is not the App's, fails doctor (exit 1)
// on its own line with a fix; the healthy one passes, also as JSON.
func TestDoctorFailsWhatServeRefuses(t *testing.T) {
	cfg := config.Default()
	const apiKey = "sk-doctor-refusals-key"
	f, err := harness.StartFakes(&cfg, 1, apiKey, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	f.OpenAI.SetLatencyScale(0.01) // doctor's 1-token calls: their latency is not under test
	f.GitHub.AddInstallation(7, "acme")
	healthy := map[string]string{
		"REDIS_URL": redistest.New(t, "--appendonly", "yes").URL(), "GITHUB_APP_ID": "1", "GITHUB_PRIVATE_KEY": string(f.KeyPEM),
		"GITHUB_API_URL": f.GitHubURL, "GITHUB_APP_SLUG": "prq-bot", "OPENAI_BASE_URL": f.OpenAIURL, "OPENAI_API_KEY": apiKey,
		"GITHUB_WEBHOOK_SECRET": "whsec-5b1d9e7f3a2c4b6d", "PRQ_ADMIN_TOKEN": "admin-7e3f1a9c5b2d4e6f",
	}
	doctor := func(override map[string]string, args ...string) (string, error) {
		var out, errb bytes.Buffer
		err := run(context.Background(), append([]string{"doctor"}, args...), func(k string) string {
			if v, ok := override[k]; ok {
				return v
			}
			return healthy[k]
		}, &out, &errb)
		return out.String(), err
	}
	if out, err := doctor(nil); err != nil || !strings.Contains(out, "ok    config ") || !strings.Contains(out, "ok    github app slug") {
		t.Fatalf("healthy: %v\n%s", err, out)
	}
	if out, err := doctor(nil, "--json"); err != nil || !strings.Contains(out, `"ok": true`) || !strings.Contains(out, `"failed": 0`) {
		t.Fatalf("healthy --json: %v\n%s", err, out)
	}
	for _, c := range []struct {
		name     string
		override map[string]string
		check    string // the failing line's name
		detail   string // a phrase of its detail
	}{
		{".env.example's webhook secret", map[string]string{"GITHUB_WEBHOOK_SECRET": "change-me"}, "config GITHUB_WEBHOOK_SECRET", "serve would not start: GITHUB_WEBHOOK_SECRET (from environment) is a placeholder"},
		{".env.example's admin token", map[string]string{"PRQ_ADMIN_TOKEN": "change-me-too"}, "config PRQ_ADMIN_TOKEN", "serve would not start: PRQ_ADMIN_TOKEN (from environment) is a placeholder"},
		{"short webhook secret", map[string]string{"GITHUB_WEBHOOK_SECRET": "s3cr3t-9"}, "config GITHUB_WEBHOOK_SECRET", "shorter than 16"},
		{"no admin token off loopback", map[string]string{"PRQ_ADMIN_TOKEN": ""}, "config PRQ_ADMIN_TOKEN", "serve would not start: PRQ_ADMIN_TOKEN is required to expose the dashboard"},
		{"no webhook secret", map[string]string{"GITHUB_WEBHOOK_SECRET": ""}, "config GITHUB_WEBHOOK_SECRET", "is required for serve"},
		{"Redis without persistence", map[string]string{"REDIS_URL": redistest.New(t).URL()}, "redis persistence", "neither AOF nor RDB"},
		{"Redis that evicts", map[string]string{"REDIS_URL": redistest.New(t, "--appendonly", "yes", "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru").URL()}, "redis eviction", "allkeys-lru"},
		{"slug not the App's", map[string]string{"GITHUB_APP_SLUG": "my-prq-bot"}, "github app slug", `GITHUB_APP_SLUG is "my-prq-bot" but the App is "prq-bot"`},
		{"no App id", map[string]string{"GITHUB_APP_ID": "", "GITHUB_PRIVATE_KEY": ""}, "github app", "GITHUB_APP_ID is not set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := doctor(c.override)
			failing := regexp.MustCompile(`(?m)^FAIL  ` + regexp.QuoteMeta(c.check) + ` {2,}.*` + regexp.QuoteMeta(c.detail))
			if exitCode(err) != 1 || !failing.MatchString(out) {
				t.Fatalf("exit %d (%v), want 1 and a failed %q saying %q:\n%s", exitCode(err), err, c.check, c.detail, out)
			}
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if strings.HasPrefix(line, "FAIL") && !strings.Contains(line, "; fix: ") {
					t.Errorf("a failure without a fix: %s", line)
				}
			}
			for _, v := range c.override {
				if len(v) > 0 && strings.Contains(v, "change-me") && strings.Contains(out, v) {
					t.Errorf("prints the secret %q", v)
				}
			}
		})
	}
	// a risk serve would accept (--allow-*) passes doctor too, the risk
	// still named on its line
	risky := map[string]string{"REDIS_URL": redistest.New(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru").URL()}
	if out, err := doctor(risky); exitCode(err) != 1 {
		t.Fatalf("a Redis that neither persists nor keeps its keys: exit %d (%v), want 1\n%s", exitCode(err), err, out)
	}
	out, err := doctor(risky, "--allow-no-persistence", "--allow-eviction")
	for _, want := range []string{"ok    redis persistence  ", "accepted by allow_no_persistence: neither AOF nor RDB", "ok    redis eviction  ", "accepted by allow_eviction: maxmemory-policy is allkeys-lru"} {
		if err != nil || !strings.Contains(out, want) {
			t.Fatalf("with --allow-no-persistence --allow-eviction: %v, want a line with %q:\n%s", err, want, out)
		}
	}
}
