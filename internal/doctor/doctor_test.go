package doctor_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/doctor"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/webhook"
)

var (
	keyOnce sync.Once
	key     *rsa.PrivateKey
)

func testKey(t *testing.T) (*rsa.PrivateKey, []byte) {
	t.Helper()
	keyOnce.Do(func() {
		var err error
		if key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
	})
	return key, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

const (
	appID         = 42
	apiKey        = "sk-doctor-test-key-0123456789"
	webhookSecret = "whsec-doctor-test-secret"
)

// env is a healthy installation: a real Redis, the fakes of GitHub and
// the provider, and serve's real webhook handler behind /webhook.
type env struct {
	in     doctor.Input
	github *fakegithub.Server
}

func newEnv(t *testing.T, ghCfg fakegithub.Config) *env {
	t.Helper()
	k, pemBytes := testKey(t)
	ghCfg.AppID, ghCfg.PublicKey = appID, &k.PublicKey
	gh := fakegithub.New(ghCfg)
	gh.AddInstallation(7, "acme")
	ghSrv := httptest.NewServer(gh)
	t.Cleanup(ghSrv.Close)

	ai := fakeopenai.New(fakeopenai.Config{Keys: []string{apiKey}, Models: []fakeopenai.Model{
		{Name: "gpt-4o-mini", RPM: 500, TPM: 200000}, {Name: "gpt-4o", RPM: 500, TPM: 30000}}})
	aiSrv := httptest.NewServer(ai)
	t.Cleanup(aiSrv.Close)

	serveURL := startServe(t, webhookSecret)
	rdb := redistest.New(t, "--appendonly", "yes").Client(t)
	return &env{github: gh, in: doctor.Input{
		Redis:  rdb,
		GitHub: doctor.GitHub{AppID: appID, PrivateKey: pemBytes, APIURL: ghSrv.URL + "/api/v3/", AppSlug: "prq-bot"}, // the fake's slug
		Provider: doctor.Provider{BaseURL: aiSrv.URL + "/v1", APIKey: apiKey, Models: []doctor.Model{
			{Name: "gpt-4o-mini", Limits: perMinute(500, 200000)},
			{Name: "gpt-4o", Limits: perMinute(500, 30000)}}},
		Webhook: doctor.Webhook{Secret: []byte(webhookSecret), ServeURL: serveURL},
	}}
}

// startServe runs prq's webhook handler as serve mounts it. A ping
// never reaches the queue or the plans, so the handler gets none.
func startServe(t *testing.T, secret string) string {
	t.Helper()
	h, err := webhook.New(webhook.Config{Secret: []byte(secret)}, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /webhook", h)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ready\n") })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func byName(rs []doctor.Result) map[string]doctor.Result {
	m := map[string]doctor.Result{}
	for _, r := range rs {
		m[r.Name] = r
	}
	return m
}

func names(rs []doctor.Result) []string {
	var n []string
	for _, r := range rs {
		n = append(n, r.Name)
	}
	return n
}

func TestHealthyInstallationPasses(t *testing.T) {
	e := newEnv(t, fakegithub.Config{})
	rs := doctor.Run(context.Background(), e.in)
	want := []string{"redis reachable", "redis version", "redis persistence", "redis eviction",
		"github key", "github app", "github app slug", "github permissions", "github installations",
		"provider key", "provider model gpt-4o-mini", "provider limits gpt-4o-mini", "provider model gpt-4o", "provider limits gpt-4o",
		"webhook secret"}
	if got := names(rs); !reflect.DeepEqual(want, got) {
		t.Fatalf("checks run:\nwant %q\ngot  %q", want, got)
	}
	var out bytes.Buffer
	doctor.Write(&out, rs)
	if doctor.Failed(rs) {
		t.Fatalf("a healthy installation failed:\n%s", out.String())
	}
	if !strings.Contains(byName(rs)["webhook secret"].Detail, "secrets match") {
		t.Errorf("webhook secret not verified through serve: %+v", byName(rs)["webhook secret"])
	}
	t.Logf("\n%s", out.String())
}

// TestFailuresNamedWithFix breaks one thing at a time and checks that the
// check that names it fails, says so, and gives a fix.
func TestFailuresNamedWithFix(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	os.WriteFile(garbage, []byte("-----BEGIN NOT A KEY-----\n"), 0o600)
	cases := []struct {
		name   string
		break_ func(t *testing.T, in *doctor.Input)
		check  string
		detail string // a phrase the failing result's detail must hold
		also   string // another check this break must fail too
	}{
		{"wrong App id", func(t *testing.T, in *doctor.Input) { in.GitHub.AppID = 43 }, "github app", "refused the JWT for App id 43", ""},
		{"no App configured", func(t *testing.T, in *doctor.Input) { in.GitHub = doctor.GitHub{} }, "github app", "GITHUB_APP_ID is not set", ""},
		{"slug not the App's", func(t *testing.T, in *doctor.Input) { in.GitHub.AppSlug = "prq-review" },
			"github app slug", `GITHUB_APP_SLUG is "prq-review" but the App is "prq-bot": comments mentioning @prq-bot will never start chat`, ""},
		{"slug unset", func(t *testing.T, in *doctor.Input) { in.GitHub.AppSlug = "" }, "github app slug", "GITHUB_APP_SLUG is not set", ""},
		{"unreadable key file", func(t *testing.T, in *doctor.Input) {
			in.GitHub.PrivateKey, in.GitHub.PrivateKeyPath = nil, filepath.Join(dir, "missing.pem")
		}, "github key", "unreadable key", ""},
		{"key that is not PEM", func(t *testing.T, in *doctor.Input) {
			in.GitHub.PrivateKey, in.GitHub.PrivateKeyPath = nil, garbage
		}, "github key", "unreadable key", ""},
		{"webhook secret mismatch", func(t *testing.T, in *doctor.Input) {
			in.Webhook.ServeURL = startServe(t, "another-secret")
		}, "webhook secret", "secrets do not match", ""},
		{"model unknown to the provider", func(t *testing.T, in *doctor.Input) {
			in.Provider.Models = append(in.Provider.Models, doctor.Model{Name: "gpt-5-imaginary"})
		}, "provider model gpt-5-imaginary", "unknown to the provider", ""},
		{"Redis with eviction on", func(t *testing.T, in *doctor.Input) {
			in.Redis = redistest.New(t, "--appendonly", "yes", "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru").Client(t)
		}, "redis eviction", "allkeys-lru", ""},
		{"Redis without persistence", func(t *testing.T, in *doctor.Input) {
			in.Redis = redistest.New(t).Client(t) // redistest starts with --save "" --appendonly no
		}, "redis persistence", "neither AOF nor RDB", ""},
		{"Redis unreachable", func(t *testing.T, in *doctor.Input) {
			s := redistest.New(t)
			c := s.Client(t)
			s.Stop()
			in.Redis = c
		}, "redis reachable", "PING", ""},
		{"limits above the provider's", func(t *testing.T, in *doctor.Input) {
			in.Provider.Models[1].Limits = perMinute(500, 90000)
		}, "provider limits gpt-4o", "tokens_per_minute 90000 > provider's 30000", ""},
		{"wrong provider key", func(t *testing.T, in *doctor.Input) { in.Provider.APIKey = "sk-wrong-key-987654321" }, "provider key", "refused OPENAI_API_KEY", ""},
		{"App without installations", func(t *testing.T, in *doctor.Input) {
			in.GitHub.APIURL = newEnvNoInstall(t)
		}, "github installations", "no installations", ""},
		{"App lacking a permission", func(t *testing.T, in *doctor.Input) {
			in.GitHub.Permissions = map[string]string{"administration": "write"}
		}, "github permissions", "permission administration: write (has none)", "github installations"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, fakegithub.Config{})
			c.break_(t, &e.in)
			rs := doctor.Run(context.Background(), e.in)
			var out bytes.Buffer
			doctor.Write(&out, rs)
			if !doctor.Failed(rs) {
				t.Fatalf("doctor passed:\n%s", out.String())
			}
			r, ok := byName(rs)[c.check]
			if !ok {
				t.Fatalf("no check %q:\n%s", c.check, out.String())
			}
			if r.OK || !strings.Contains(r.Detail, c.detail) || r.Fix == "" {
				t.Fatalf("want %q failed with %q and a fix, got %+v\n%s", c.check, c.detail, r, out.String())
			}
			if !strings.Contains(out.String(), "FAIL  "+c.check) || !strings.Contains(out.String(), "fix: "+r.Fix) {
				t.Errorf("the output does not name the check with its fix:\n%s", out.String())
			}
			for _, other := range rs { // only the broken thing fails
				if !other.OK && other.Name != c.check && other.Name != c.also {
					t.Errorf("%s also failed: %+v", other.Name, other)
				}
			}
			_, pemBytes := testKey(t)
			keyBody := strings.Split(string(pemBytes), "\n")[1] // a line of the key itself
			for _, s := range []string{apiKey, webhookSecret, "sk-wrong-key-987654321", keyBody} {
				if strings.Contains(out.String(), s) {
					t.Errorf("output holds a secret %q:\n%s", s, out.String())
				}
			}
		})
	}
}

// TestWriteJSON: --json is one object automation can read.
func TestWriteJSON(t *testing.T) {
	rs := []doctor.Result{{Name: "redis reachable", OK: true, Detail: "PING answered"}, {Name: "github app slug", Detail: "differs", Fix: "set it"}}
	var out bytes.Buffer
	if err := doctor.WriteJSON(&out, rs); err != nil {
		t.Fatal(err)
	}
	var got struct {
		OK     bool
		Failed int
		Checks []doctor.Result
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if got.OK || got.Failed != 1 || !reflect.DeepEqual(got.Checks, rs) || !strings.Contains(out.String(), `"fix": "set it"`) {
		t.Fatalf("decoded %+v from:\n%s", got, out.String())
	}
}

func newEnvNoInstall(t *testing.T) string {
	k, _ := testKey(t)
	srv := httptest.NewServer(fakegithub.New(fakegithub.Config{AppID: appID, PublicKey: &k.PublicKey}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestReady(t *testing.T) {
	e := newEnv(t, fakegithub.Config{})
	rs := doctor.Ready(context.Background(), e.in.Redis, nil, e.in.Webhook.ServeURL)
	if got := names(rs); !reflect.DeepEqual([]string{"redis reachable", "serve ready"}, got) || doctor.Failed(rs) {
		t.Fatalf("ready: %+v", rs)
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	rs = doctor.Ready(context.Background(), e.in.Redis, nil, down.URL)
	if r := byName(rs)["serve ready"]; r.OK || r.Fix == "" {
		t.Fatalf("serve down passed: %+v", r)
	}
}

// TestRequiredMatchManifest keeps the App's required permissions and
// events equal to the manifest users register the App with.
func TestRequiredMatchManifest(t *testing.T) {
	b, err := os.ReadFile("../../github-app-manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Permissions map[string]string `json:"default_permissions"`
		Events      []string          `json:"default_events"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m.Permissions, doctor.RequiredPermissions) {
		t.Errorf("permissions: manifest %v, doctor %v", m.Permissions, doctor.RequiredPermissions)
	}
	want, got := append([]string(nil), m.Events...), append([]string(nil), doctor.RequiredEvents...)
	sort.Strings(want)
	sort.Strings(got)
	if !reflect.DeepEqual(want, got) {
		t.Errorf("events: manifest %v, doctor %v", want, got)
	}
}

// TestWebhookWithoutSecret: a worker has no webhook secret and needs
// none; checking serve without one cannot work and says so.
func TestWebhookWithoutSecret(t *testing.T) {
	url := startServe(t, webhookSecret)
	for _, c := range []struct {
		name string
		in   doctor.Webhook
		ok   bool
	}{
		{"worker: no secret, no serve", doctor.Webhook{}, true},
		{"no secret to sign serve's ping", doctor.Webhook{ServeURL: url}, false},
		{"secret, no serve", doctor.Webhook{Secret: []byte(webhookSecret)}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := doctor.CheckWebhook(context.Background(), http.DefaultClient, c.in)
			if r.OK != c.ok || (!r.OK && r.Fix == "") {
				t.Fatalf("want ok=%v with a fix when failing, got %+v", c.ok, r)
			}
		})
	}
}

// TestEveryKeyChecked: with several keys, each is checked as the first
// is; a second key the provider refuses fails its own check, named by the
// key's hash and never the key, while the first key's pass.
func TestEveryKeyChecked(t *testing.T) {
	e := newEnv(t, fakegithub.Config{})
	in := e.in
	in.Redis, in.GitHub, in.Webhook = nil, doctor.GitHub{}, doctor.Webhook{}
	bad := "sk-doctor-not-a-known-key-42"
	in.Provider.MoreKeys = []string{bad}
	rs := doctor.Run(context.Background(), in)
	got := byName(rs)
	if r := got["provider key"]; !r.OK {
		t.Fatalf("the first key failed: %+v", r)
	}
	name := "provider key (key 2, " + ratelimit.KeyHash(bad) + ")"
	r, ok := got[name]
	if !ok {
		t.Fatalf("no check for the second key; ran %q", names(rs))
	}
	if r.OK || !strings.Contains(r.Detail, "refused") || r.Fix == "" {
		t.Fatalf("the refused second key: %+v", r)
	}
	var out bytes.Buffer
	doctor.Write(&out, rs)
	if strings.Contains(out.String(), bad) {
		t.Fatalf("the key reached doctor's output:\n%s", out.String())
	}
}

// perMinute is a model's request and token limits per minute.
func perMinute(requests, tokens int64) *ratelimit.Limits {
	return &ratelimit.Limits{Period: time.Minute, RequestsPerPeriod: requests, TokensPerPeriod: tokens}
}
