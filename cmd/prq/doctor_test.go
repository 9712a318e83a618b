package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
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
	f.GitHub.AddInstallation(7, "acme")
	rdb := redistest.New(t, "--appendonly", "yes")
	env := map[string]string{
		"REDIS_URL": rdb.URL(), "GITHUB_APP_ID": "1", "GITHUB_PRIVATE_KEY": string(f.KeyPEM), "GITHUB_API_URL": f.GitHubURL,
		"OPENAI_BASE_URL": f.OpenAIURL, "OPENAI_API_KEY": apiKey, "GITHUB_WEBHOOK_SECRET": "doctor-secret-6f1e2a9b7c3d",
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
