package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/config"
)

// TestGitLabAloneNeedsNoGitHubSecret: with GitLab tenants alone, serve
// starts without github.webhook_secret, takes GitLab's deliveries at
// POST /webhook/gitlab and none at POST /webhook (no secret, no GitHub
// route); without GitLab tenants the secret is still required.
func TestGitLabAloneNeedsNoGitHubSecret(t *testing.T) {
	hookToken := "9b1f0c3e7a2d4e6f8a0b1c2d3e4f5a6b"
	gitlabOnly := func(c *config.Config) {
		c.GitHub.WebhookSecret = ""
		c.Admin.Token = testToken
		c.Addr = "127.0.0.1:0"
		c.GitLab = config.GitLabConfig{URL: "http://127.0.0.1:1", WebhookToken: config.Secret(hookToken),
			Tenants: []config.GitLabTenantConfig{{ID: 42, Path: "acme", Token: "glpat-test-token-0123"}}}
	}
	s, _ := newTestServer(t, gitlabOnly)
	if err := s.cfg.Validate(config.ModeServe); err != nil {
		t.Fatalf("a GitLab-only configuration refused for serve: %v", err)
	}
	noTenants := config.Default()
	noTenants.RedisURL, noTenants.Admin.Token = "redis://127.0.0.1:6379", testToken
	if err := noTenants.Validate(config.ModeServe); err == nil || !strings.Contains(err.Error(), "GITHUB_WEBHOOK_SECRET") {
		t.Fatalf("serve without GitLab tenants nor a webhook secret: %v, want GITHUB_WEBHOOK_SECRET required", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, io.Discard, Roles{HTTP: true}, Options{}) }()
	t.Cleanup(func() { cancel(); <-done })
	for s.ListenAddr() == "" {
		select {
		case err := <-done:
			t.Fatalf("serve: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	base := "http://" + s.ListenAddr()
	mr := `{"object_kind":"merge_request","project":{"path_with_namespace":"acme/api"},"user":{"id":1,"username":"alice"},` +
		`"object_attributes":{"iid":7,"state":"opened","action":"open","last_commit":{"id":"` + strings.Repeat("a", 40) + `"}}}`
	code, body, _ := do(t, "POST", base+"/webhook/gitlab", func(r *http.Request) {
		r.Header.Set("X-Gitlab-Event", "Merge Request Hook")
		r.Header.Set("X-Gitlab-Token", hookToken)
		r.Header.Set("Idempotency-Key", "2f7c1a3e-5b6d-4e8f-9a0b-1c2d3e4f5a6b")
	}, mr)
	if code != http.StatusAccepted {
		t.Fatalf("POST /webhook/gitlab: %d %s, want 202", code, body)
	}
	code, _, _ = do(t, "POST", base+"/webhook", func(r *http.Request) { r.Header.Set("X-GitHub-Event", "ping") }, `{}`)
	if code < 400 || code == http.StatusServiceUnavailable {
		t.Fatalf("POST /webhook without a GitHub secret: %d, want it refused", code)
	}
}
