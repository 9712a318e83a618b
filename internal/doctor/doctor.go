// Package doctor checks a prq installation from the outside: Redis
// (reachable, version, persistence, eviction), the GitHub App (its JWT,
// installations, permissions and events), the LLM provider (each model
// listed, callable and its limits) and the webhook secret (a signed ping
// through the running serve). Each check is a function of explicit
// inputs returning Results; the caller (prq doctor) maps its
// configuration to Input and prints them. It does not read prq's
// configuration, start anything or write to Redis, GitHub or the provider
// beyond one 1-token completion per model.
package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
)

// Result is the outcome of one check. Detail and Fix never hold a secret.
type Result struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	// Fix says what to do when the check fails ("" when it passes).
	Fix string `json:"fix,omitempty"`
}

// Input is what the checks need. A zero section is skipped.
type Input struct {
	// Redis is prq's Redis; nil skips the Redis checks.
	Redis redis.UniversalClient
	// RedisAllow is what the operator accepts of Redis knowingly
	// (allow_eviction, allow_no_persistence): those checks pass with a
	// warning instead of failing.
	RedisAllow RedisAllow
	// GitHub is the App; with neither an AppID nor a key, one failed
	// line says so.
	GitHub GitHub
	// Provider is the LLM provider; no Models skips the provider checks.
	Provider Provider
	// Calls are the other providers (Azure OpenAI, Anthropic), one per
	// key, checked through prq's own clients.
	Calls []Call
	// Webhook is the webhook secret and where serve listens.
	Webhook Webhook
	// HTTPClient makes every HTTP call. Defaults to a client with a 20s timeout.
	HTTPClient *http.Client
	// NowFunc is the clock (JWT times). Defaults to time.Now.
	NowFunc func() time.Time
}

// GitHub is the GitHub App to check.
type GitHub struct {
	AppID int64
	// PrivateKey is the App's PEM key; when empty, PrivateKeyPath is read.
	PrivateKey     []byte
	PrivateKeyPath string
	// APIURL defaults to https://api.github.com/ (Enterprise: .../api/v3/).
	APIURL string
	// AppSlug is the configured slug (GITHUB_APP_SLUG): people mention
	// @slug to chat, so it must be the App's real one (GET /app).
	AppSlug string
	// Permissions and Events the App needs. Default to
	// RequiredPermissions and RequiredEvents.
	Permissions map[string]string
	Events      []string
}

// Provider is the OpenAI-compatible provider to check.
type Provider struct {
	// BaseURL defaults to https://api.openai.com/v1.
	BaseURL string
	APIKey  string
	// MoreKeys are the provider's other keys (key_env a list): each is
	// checked as APIKey is, its results named by the key's short hash.
	MoreKeys []string
	Models   []Model
}

// Model is one configured model, as workers and the gateway call it
// (llmcall.FromConfig): doctor reads its name, Reasoning and Limits.
type Model = llmcall.Model

// perMinute is a model's configured limits per minute, as providers state
// theirs (0: not configured, not compared).
type perMinute struct{ requests, tokens, input, output int64 }

func limitsPerMinute(m Model) perMinute {
	l := m.Limits
	if l == nil {
		return perMinute{}
	}
	period := l.Period
	if period <= 0 {
		period = time.Minute
	}
	pm := func(n int64) int64 { return n * int64(time.Minute) / int64(period) }
	return perMinute{pm(l.RequestsPerPeriod), pm(l.TokensPerPeriod), pm(l.InputTokensPerPeriod), pm(l.OutputTokensPerPeriod)}
}

// Webhook is the webhook secret and, optionally, serve's address.
type Webhook struct {
	Secret []byte
	// ServeURL is serve's base URL (http://127.0.0.1:8080); empty skips
	// the round trip.
	ServeURL string
}

// RequiredPermissions are the App permissions prq needs; they match
// github-app-manifest.json (a test keeps them equal).
var RequiredPermissions = map[string]string{"pull_requests": "write", "issues": "write", "checks": "write", "contents": "read", "metadata": "read"}

// RequiredEvents are the webhook events prq needs (github-app-manifest.json).
var RequiredEvents = []string{"pull_request", "issue_comment", "pull_request_review_comment"}

func (in *Input) defaults() {
	if in.HTTPClient == nil {
		in.HTTPClient = &http.Client{Timeout: 20 * time.Second}
	}
	if in.NowFunc == nil {
		in.NowFunc = time.Now
	}
}

// Run runs every check whose input is given, in order: Redis, GitHub,
// provider, webhook.
func Run(ctx context.Context, in Input) []Result {
	in.defaults()
	var out []Result
	if in.Redis != nil {
		out = append(out, Redis(ctx, in.Redis, in.RedisAllow)...)
	}
	if in.GitHub.AppID != 0 || len(in.GitHub.PrivateKey) > 0 || in.GitHub.PrivateKeyPath != "" {
		out = append(out, CheckGitHub(ctx, in.HTTPClient, in.NowFunc(), in.GitHub)...)
	} else {
		out = append(out, Result{Name: "github app", Detail: "GITHUB_APP_ID is not set, nor a private key: workers cannot act as a GitHub App",
			Fix: "create the App (docs/getting-started.md), then set GITHUB_APP_ID, GITHUB_APP_SLUG and GITHUB_PRIVATE_KEY_PATH"})
	}
	if len(in.Provider.Models) > 0 {
		out = append(out, CheckProvider(ctx, in.HTTPClient, in.Provider)...)
		for i, k := range in.Provider.MoreKeys {
			p := in.Provider
			p.APIKey, p.MoreKeys = k, nil
			for _, r := range CheckProvider(ctx, in.HTTPClient, p) {
				r.Name += fmt.Sprintf(" (key %d, %s)", i+2, ratelimit.KeyHash(k))
				out = append(out, r)
			}
		}
	}
	for _, c := range in.Calls {
		out = append(out, CheckCall(ctx, c)...)
	}
	out = append(out, CheckWebhook(ctx, in.HTTPClient, in.Webhook))
	return redact(out, in.secrets())
}

// Ready is the container healthcheck: Redis answers, and serve (when
// serveURL is given) answers GET /readyz.
func Ready(ctx context.Context, rdb redis.UniversalClient, client *http.Client, serveURL string) []Result {
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	var out []Result
	if rdb != nil {
		out = append(out, redisReachable(ctx, rdb))
	}
	if serveURL != "" {
		out = append(out, serveReady(ctx, client, serveURL))
	}
	return out
}

func serveReady(ctx context.Context, client *http.Client, serveURL string) Result {
	r := Result{Name: "serve ready"}
	u := strings.TrimSuffix(serveURL, "/") + "/readyz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		r.Detail, r.Fix = fmt.Sprintf("bad --url %q", serveURL), "give serve's base URL, for example http://127.0.0.1:8080"
		return r
	}
	resp, err := client.Do(req)
	if err != nil {
		r.Detail, r.Fix = fmt.Sprintf("GET %s: %v", u, err), "start serve (prq serve) or point --url at it"
		return r
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		r.Detail = fmt.Sprintf("GET %s answered %d %s", u, resp.StatusCode, strings.TrimSpace(string(body)))
		r.Fix = "serve is up but not ready: check its Redis (REDIS_URL) and its log"
		return r
	}
	r.OK, r.Detail = true, "GET "+u+" answered 200"
	return r
}

// Failed reports whether any result failed.
func Failed(rs []Result) bool {
	for _, r := range rs {
		if !r.OK {
			return true
		}
	}
	return false
}

// Write prints one line per result: "ok", or "FAIL" with the fix.
func Write(w io.Writer, rs []Result) error {
	width := 0
	for _, r := range rs {
		width = max(width, len(r.Name))
	}
	for _, r := range rs {
		var err error
		if r.OK {
			_, err = fmt.Fprintf(w, "ok    %-*s  %s\n", width, r.Name, r.Detail)
		} else {
			_, err = fmt.Fprintf(w, "FAIL  %-*s  %s; fix: %s\n", width, r.Name, r.Detail, r.Fix)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// WriteJSON prints the results as one JSON object, for automation:
// {"ok": false, "failed": 1, "checks": [{"name", "ok", "detail", "fix"}]}.
func WriteJSON(w io.Writer, rs []Result) error {
	failed := 0
	for _, r := range rs {
		if !r.OK {
			failed++
		}
	}
	if rs == nil {
		rs = []Result{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		OK     bool     `json:"ok"`
		Failed int      `json:"failed"`
		Checks []Result `json:"checks"`
	}{failed == 0, failed, rs})
}

// secrets returns every secret value that must not appear in results.
func (in *Input) secrets() []string {
	var s []string
	all := append([]string{in.Provider.APIKey, string(in.Webhook.Secret), string(in.GitHub.PrivateKey)}, in.Provider.MoreKeys...)
	for _, c := range in.Calls {
		all = append(all, c.APIKey)
	}
	for _, v := range all {
		if len(v) >= 4 {
			s = append(s, v)
		}
	}
	return s
}

// redact removes secrets from results, in case a server echoed one.
func redact(rs []Result, secrets []string) []Result {
	for i := range rs {
		for _, s := range secrets {
			rs[i].Detail = strings.ReplaceAll(rs[i].Detail, s, "[redacted]")
			rs[i].Fix = strings.ReplaceAll(rs[i].Fix, s, "[redacted]")
		}
	}
	return rs
}

// oneLine shortens a server's message for a result line.
func oneLine(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
