package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/harness"
	"github.com/prq-dev/prq/internal/redistest"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	negative := write("neg.yaml", "models:\n  - {name: gpt-4o-mini, requests_per_minute: 10, tokens_per_minute: -5}\n  - {name: gpt-4o, requests_per_minute: 10, tokens_per_minute: 100}\n")
	badTier := write("tier.yaml", "plans:\n  - {installation: 5, tier: platinum}\n")
	unknownKey := write("key.yaml", "modles: []\n")
	notPEM := write("key.pem", "ssh-rsa AAAAB3NzaC1yc2E not a pem\n")
	badLimiter := write("limiter.yaml", "models:\n  - {name: gpt-4o-mini, requests_per_minute: 10, tokens_per_minute: 100, limiter: leaky}\n  - {name: gpt-4o, requests_per_minute: 10, tokens_per_minute: 100}\n")
	badSub := write("sub.yaml", "models:\n  - {name: gpt-4o-mini, requests_per_minute: 10, tokens_per_minute: 100}\n  - {name: gpt-4o, requests_per_minute: 10, tokens_per_minute: 100, limiter: window, sub_window: 2m}\n")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string // the setting the error names
	}{
		{"malformed REDIS_URL", []string{"check"}, map[string]string{"REDIS_URL": "redis://:pw@host-without-port"}, "REDIS_URL"},
		{"unknown scheme", []string{"check"}, map[string]string{"REDIS_URL": "mysql://h:1"}, "REDIS_URL"},
		{"negative limit", []string{"check"}, map[string]string{"PRQ_CONFIG": negative}, "models.gpt-4o-mini"},
		{"unknown tier in a plan", []string{"check"}, map[string]string{"PRQ_CONFIG": badTier}, "plans[0].tier"},
		{"unknown limiter", []string{"check"}, map[string]string{"PRQ_CONFIG": badLimiter}, "models.gpt-4o-mini: limiter must be"},
		{"sub-window longer than the window", []string{"check"}, map[string]string{"PRQ_CONFIG": badSub}, "models.gpt-4o: sub-window 2m0s must be shorter"},
		{"unknown key", []string{"check"}, map[string]string{"PRQ_CONFIG": unknownKey}, "key.yaml:1: modles: unknown setting; did you mean models?"},
		{"serve without webhook secret", []string{"check", "--for", "serve"}, map[string]string{"REDIS_URL": "redis://127.0.0.1:6379"}, "GITHUB_WEBHOOK_SECRET"},
		{"serve without redis", []string{"check", "--for", "serve"}, map[string]string{"GITHUB_WEBHOOK_SECRET": "s"}, "REDIS_URL"},
		{"key file without a PEM", []string{"check"}, map[string]string{"GITHUB_PRIVATE_KEY_PATH": notPEM}, "GITHUB_PRIVATE_KEY_PATH (from environment): " + notPEM + " holds no PEM key"},
		{"bad app id", []string{"check"}, map[string]string{"GITHUB_APP_ID": "twelve"}, "GITHUB_APP_ID"},
		{"bad log format", []string{"check", "--log-format", "xml"}, nil, "PRQ_LOG_FORMAT (from flag --log-format)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := run(context.Background(), append([]string{"config"}, tt.args...), envOf(tt.env), &out, &errb)
			if err == nil {
				t.Fatalf("accepted; printed:\n%s", out.String())
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error does not name %s: %v", tt.want, err)
			}
			if strings.Contains(err.Error(), "pw@") {
				t.Fatalf("the error leaks a password: %v", err)
			}
		})
	}
	for _, limiter := range []string{"window", "auto"} {
		t.Run(limiter+" limiter", func(t *testing.T) {
			p := write(limiter+".yaml", "models:\n  - {name: gpt-4o-mini, requests_per_minute: 10, tokens_per_minute: 100}\n  - {name: gpt-4o, requests_per_minute: 10, tokens_per_minute: 100, limiter: "+limiter+", sub_window: 10s, sub_window_share: 0.25}\n")
			var out bytes.Buffer
			if err := run(context.Background(), []string{"config", "check"}, envOf(map[string]string{"PRQ_CONFIG": p}), &out, &out); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "limiter: "+limiter) || !strings.Contains(out.String(), "sub_window: 10s") {
				t.Fatalf("window settings not in the effective config:\n%s", out.String())
			}
		})
	}
	t.Run("effective values and their differences from the defaults", func(t *testing.T) {
		p := write("few.yaml", "worker: {concurrency: 7}\ngithub: {check_runs: false}\n")
		var out bytes.Buffer
		if err := run(context.Background(), []string{"config", "check"}, envOf(map[string]string{"PRQ_CONFIG": p}), &out, &out); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"max_review_parts: 20", "period: 1m", "concurrency: 7", "check_runs: false", "repo_config: true"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("the effective configuration lacks %q:\n%s", want, out.String())
			}
		}
		out.Reset()
		if err := run(context.Background(), []string{"config", "check", "--diff-defaults", "--log-level", "debug"}, envOf(map[string]string{"PRQ_CONFIG": p}), &out, &out); err != nil {
			t.Fatal(err)
		}
		if want := "github:\n    check_runs: false\nlog:\n    level: debug\nworker:\n    concurrency: 7\n"; out.String() != want {
			t.Fatalf("--diff-defaults printed:\n%s\nwant:\n%s", out.String(), want)
		}
	})
	t.Run("good config is printed redacted", func(t *testing.T) {
		env := map[string]string{"REDIS_URL": "redis://:hunter2@127.0.0.1:6379/0", "GITHUB_WEBHOOK_SECRET": "webhook-secret-xyz",
			"OPENAI_API_KEY": "sk-live-abcdef", "GITHUB_PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----\nabc", "GITHUB_APP_ID": "12", "PRQ_ADMIN_TOKEN": "tok-123-4f9a8b7c6d5e"}
		var out bytes.Buffer
		if err := run(context.Background(), []string{"config", "check", "--for", "all"}, envOf(env), &out, &out); err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{"hunter2", "webhook-secret-xyz", "sk-live-abcdef", "BEGIN RSA", "tok-123-4f9a8b7c6d5e"} {
			if strings.Contains(out.String(), secret) {
				t.Fatalf("the printed config contains %q:\n%s", secret, out.String())
			}
		}
		if !strings.Contains(out.String(), "[redacted]") || !strings.Contains(out.String(), "tokens_per_minute") {
			t.Fatalf("effective config not printed:\n%s", out.String())
		}
	})
}

func TestCommandsHelp(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"nope"}, envOf(nil), &out, &out); exitCode(err) != 2 {
		t.Errorf("unknown command: %v", err)
	}
	if err := run(context.Background(), []string{"serve"}, envOf(nil), &out, &out); err == nil || !strings.Contains(err.Error(), "REDIS_URL") {
		t.Errorf("serve without REDIS_URL: %v", err)
	}
	// bad values are usage errors, before anything starts
	for _, args := range [][]string{
		{"fake", "openai", "--limiter", "leaky"},
		{"bench", "--provider-limiter", "leaky"},
	} {
		if err := run(context.Background(), args, envOf(nil), &out, &out); exitCode(err) != 2 || !strings.Contains(err.Error(), "leaky") {
			t.Errorf("%v: %v, want a usage error naming the value", args, err)
		}
	}
}

func TestServeRefusesOpenDashboardOffLoopback(t *testing.T) {
	srv := redistest.New(t)
	env := map[string]string{"REDIS_URL": srv.URL(), "GITHUB_WEBHOOK_SECRET": harness.RandomHex(32), "PRQ_ALLOW_NO_PERSISTENCE": "true"}
	var out bytes.Buffer
	err := run(context.Background(), []string{"serve", "--addr", "0.0.0.0:0"}, envOf(env), &out, &out)
	if err == nil || !strings.Contains(err.Error(), "PRQ_ADMIN_TOKEN") {
		t.Fatalf("serve exposed the dashboard without auth: %v", err)
	}
}

// TestDemoRefusesOpenDashboardOffLoopback: the demo's admin surfaces are
// open only on loopback; elsewhere it needs a token, as serve does.
func TestDemoRefusesOpenDashboardOffLoopback(t *testing.T) {
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := run(ctx, []string{"demo", "--addr", "0.0.0.0:0", "--rate", "0", "--chat-rate", "0", "--log-level", "error"}, envOf(nil), &out, &out)
	if err == nil || !strings.Contains(err.Error(), "PRQ_ADMIN_TOKEN") {
		t.Fatalf("the demo exposed a writable admin without a token: %v\n%s", err, out.String())
	}
}

// TestServeRefusesRedisWithoutPersistence: serve refuses a Redis with
// neither AOF nor RDB unless --allow-no-persistence (or the environment).
func TestServeRefusesRedisWithoutPersistence(t *testing.T) {
	srv := redistest.New(t, "--save", "", "--appendonly", "no")
	if !srv.Real() {
		t.Skip("needs a real redis-server")
	}
	env := map[string]string{"REDIS_URL": srv.URL(), "GITHUB_WEBHOOK_SECRET": harness.RandomHex(32)}
	var out bytes.Buffer
	err := run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0"}, envOf(env), &out, &out)
	if err == nil || !strings.Contains(err.Error(), "--allow-no-persistence") {
		t.Fatalf("serve accepted a Redis without persistence: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var served harness.SyncBuffer
	go func() {
		done <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--allow-no-persistence"}, envOf(env), &served, &served)
	}()
	for !strings.Contains(served.String(), "metrics http://") {
		select {
		case err := <-done:
			t.Fatalf("serve --allow-no-persistence: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestServeWithoutTokenPrintsNoDeadURL: serve on loopback without
// PRQ_ADMIN_TOKEN does not print a dashboard URL that would answer 401,
// but how to open it; with a token it prints the URL.
func TestServeWithoutTokenPrintsNoDeadURL(t *testing.T) {
	srv := redistest.New(t, "--appendonly", "yes")
	for _, token := range []string{"", harness.RandomHex(16)} {
		env := map[string]string{"REDIS_URL": srv.URL(), "GITHUB_WEBHOOK_SECRET": harness.RandomHex(32), "PRQ_ADMIN_TOKEN": token}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		var out harness.SyncBuffer
		go func() { done <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0"}, envOf(env), &out, &out) }()
		for !strings.Contains(out.String(), "metrics http://") {
			select {
			case err := <-done:
				t.Fatalf("serve: %v\n%s", err, out.String())
			case <-time.After(20 * time.Millisecond):
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		printed := out.String()
		if token == "" && (strings.Contains(printed, "dashboard http://") || !strings.Contains(printed, "need PRQ_ADMIN_TOKEN")) {
			t.Errorf("without a token:\n%s", printed)
		}
		if token != "" && !strings.Contains(printed, "dashboard http://") {
			t.Errorf("with a token:\n%s", printed)
		}
	}
}
