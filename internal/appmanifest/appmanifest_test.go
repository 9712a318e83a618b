package appmanifest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/fake/fakegithub/openapi"
	"github.com/prq-dev/prq/internal/appmanifest"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/doctor"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"))
}

var (
	formAction   = regexp.MustCompile(`<form id="manifest" method="post" action="([^"]*)">`)
	formManifest = regexp.MustCompile(`<input type="hidden" name="manifest" value="([^"]*)">`)
)

// page reads the local page as a browser does: the form's action and
// its manifest field.
func page(t *testing.T, pageURL string) (action, manifest string) {
	t.Helper()
	resp, err := http.Get(pageURL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	a, m := formAction.FindSubmatch(b), formManifest.FindSubmatch(b)
	if resp.StatusCode != 200 || a == nil || m == nil || !bytes.Contains(b, []byte("submit()")) {
		t.Fatalf("the page: %d %s, want a form that posts itself", resp.StatusCode, b)
	}
	return html.UnescapeString(string(a[1])), html.UnescapeString(string(m[1]))
}

// browse plays the person: it opens the page, submits its form to
// GitHub, and follows GitHub's redirect back to the callback; it returns
// the page the browser ends on.
func browse(t *testing.T, pageURL string) (int, string) {
	t.Helper()
	action, manifest := page(t, pageURL)
	resp, err := http.PostForm(action, url.Values{"manifest": {manifest}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

type run struct {
	res *appmanifest.Result
	err error
}

// start runs the flow; the page's URL arrives on the returned channel.
func start(ctx context.Context, cfg appmanifest.Config) (<-chan string, <-chan run) {
	ready, done := make(chan string, 1), make(chan run, 1)
	cfg.ReadyFunc = func(u string) { ready <- u }
	go func() {
		res, err := appmanifest.Run(ctx, cfg)
		done <- run{res, err}
	}()
	return ready, done
}

// readEnv reads an env file of KEY=value lines (values bare or in single
// quotes), as docker compose does.
func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			env[strings.TrimPrefix(k, "export ")] = strings.Trim(v, "'")
		}
	}
	return env
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

// TestSetupGitHubAgainstTheFake runs the whole flow against the fake
// GitHub as an Enterprise Server, for an organisation: the page posts
// the manifest, GitHub redirects back, the code is exchanged and the
// files written; the configuration they make passes serve's and
// worker's checks and doctor's GitHub App checks once the App is
// installed.
func TestSetupGitHubAgainstTheFake(t *testing.T) {
	fake := fakegithub.New(fakegithub.Config{})
	fake.RecordRequests()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	dir := t.TempDir()
	envFile, keyFile := filepath.Join(dir, ".env"), filepath.Join(dir, "secrets", "github-app.pem")
	ready, done := start(context.Background(), appmanifest.Config{WebhookURL: "https://prq.acme.example", Name: "prq acme",
		GitHubURL: srv.URL, Org: "acme", EnvFile: envFile, KeyFile: keyFile})
	status, body := browse(t, <-ready)
	r := <-done
	if r.err != nil {
		t.Fatalf("Run: %v (the browser saw %d %s)", r.err, status, body)
	}
	install := srv.URL + "/apps/prq-acme/installations/new"
	if status != 200 || !strings.Contains(body, install) {
		t.Errorf("the browser ends on %d %s, want the install link %s", status, body, install)
	}
	want := appmanifest.Result{AppID: r.res.AppID, Slug: "prq-acme", Name: "prq acme", ClientID: r.res.ClientID, Owner: "acme",
		HTMLURL: srv.URL + "/apps/prq-acme", InstallURL: install, EnvFile: envFile, KeyFile: keyFile, KeyPath: keyFile,
		HasWebhookSecret: true, APIURL: srv.URL + "/api/v3/", GitHubURL: srv.URL}
	if *r.res != want || r.res.AppID <= 0 || r.res.ClientID == "" {
		t.Errorf("Result\n got %+v\nwant %+v", *r.res, want)
	}
	for _, f := range []string{envFile, keyFile} {
		if m := mode(t, f); m != 0o600 {
			t.Errorf("%s: mode %o, want 600", f, m)
		}
	}
	env := readEnv(t, envFile)
	if env["GITHUB_APP_ID"] != fmt.Sprint(r.res.AppID) || env["GITHUB_APP_SLUG"] != "prq-acme" || env["GITHUB_PRIVATE_KEY_PATH"] != keyFile ||
		len(env["GITHUB_WEBHOOK_SECRET"]) < 32 || env["GITHUB_API_URL"] != srv.URL+"/api/v3/" {
		t.Errorf("env file: %v", env)
	}
	// the rest of a first configuration, as docs/getting-started.md has the reader add it
	env["OPENAI_API_KEY"], env["PRQ_ADMIN_TOKEN"], env["REDIS_URL"] = "sk-test", strings.Repeat("a1", 16), "redis://127.0.0.1:6379/0"
	cfg, err := config.Load(func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(config.ModeAll); err != nil {
		t.Errorf("serve and worker refuse the produced configuration: %v", err)
	}
	fake.AddInstallation(501, "acme") // the person follows the install link
	checks := doctor.CheckGitHub(context.Background(), srv.Client(), time.Now(), doctor.GitHub{AppID: cfg.GitHub.AppID, AppSlug: cfg.GitHub.AppSlug,
		PrivateKey: []byte(cfg.GitHub.PrivateKey), PrivateKeyPath: cfg.GitHub.PrivateKeyPath, APIURL: cfg.GitHub.APIURL})
	if len(checks) != 5 {
		t.Errorf("doctor ran %d GitHub checks, want key, app, slug, permissions, installations: %+v", len(checks), checks)
	}
	for _, c := range checks {
		if !c.OK {
			t.Errorf("doctor: %s: %s (%s)", c.Name, c.Detail, c.Fix)
		}
	}
	if strings.Contains(fmt.Sprintf("%+v", *r.res), env["GITHUB_WEBHOOK_SECRET"]) {
		t.Error("the Result holds the webhook secret")
	}
	checkAPIRequests(t, fake.Requests(), "apps/create-from-manifest")
}

// checkAPIRequests checks every request made to the fake's Enterprise
// API against the Enterprise Server's REST description, and that want
// was among them.
func checkAPIRequests(t *testing.T, reqs []fakegithub.Request, want string) {
	t.Helper()
	v, err := openapi.Load()
	if err != nil {
		t.Fatal(err)
	}
	seen := false
	for _, r := range reqs {
		if !r.Enterprise() {
			continue // the browser's form, a web page
		}
		op, errs := v.Enterprise().Check(openapi.Request{Method: r.Method, Path: r.APIPath(), RawQuery: r.RawQuery, Accept: r.Accept,
			ContentType: r.ContentType, Body: r.Body}, openapi.Strict)
		for _, e := range errs {
			t.Errorf("%s %s: not as GitHub's description has it: %s", r.Method, r.Path, e)
		}
		seen = seen || (op != nil && op.OperationID == want)
	}
	if !seen {
		t.Errorf("no %s request among %d", want, len(reqs))
	}
}

// TestWrongStateIsIgnored: a callback with another state is answered 400
// and changes nothing; the real redirect then completes the flow.
func TestWrongStateIsIgnored(t *testing.T) {
	srv := httptest.NewServer(fakegithub.New(fakegithub.Config{}))
	defer srv.Close()
	dir := t.TempDir()
	ready, done := start(context.Background(), appmanifest.Config{WebhookURL: "https://h.example/webhook", Name: "state test",
		GitHubURL: srv.URL, EnvFile: filepath.Join(dir, "prq.env"), KeyFile: filepath.Join(dir, "k.pem")})
	pageURL := <-ready
	for _, q := range []string{"state=forged&code=abc", "code=abc", "state=&code=abc"} {
		resp, err := http.Get(pageURL + "callback?" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("callback?%s: %d, want 400", q, resp.StatusCode)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "k.pem")); err == nil {
		t.Fatal("a forged callback wrote the key")
	}
	if status, body := browse(t, pageURL); status != 200 {
		t.Errorf("the real redirect: %d %s", status, body)
	}
	if r := <-done; r.err != nil || r.res.Owner != fakegithub.WebUser {
		t.Fatalf("Run: %+v %v, want the signed-in user's App", r.res, r.err)
	}
}

// TestExistingFiles: without Force an existing file stops Run before it
// serves anything; with Force the key is replaced and the env file's
// GitHub settings are updated in place, its other lines kept.
func TestExistingFiles(t *testing.T) {
	srv := httptest.NewServer(fakegithub.New(fakegithub.Config{}))
	defer srv.Close()
	dir := t.TempDir()
	envFile, keyFile := filepath.Join(dir, ".env"), filepath.Join(dir, "app.pem")
	old := "# mine\nOPENAI_API_KEY=sk-kept\nGITHUB_APP_ID=1\nexport GITHUB_PRIVATE_KEY=old-pem\nPRQ_ADMIN_TOKEN=kept-too\nGITHUB_APP_ID=2"
	os.WriteFile(envFile, []byte(old), 0o644)
	os.WriteFile(keyFile, []byte("old key"), 0o600)
	cfg := appmanifest.Config{WebhookURL: "https://h.example/webhook", Name: "force test", GitHubURL: srv.URL, EnvFile: envFile, KeyFile: keyFile,
		ReadyFunc: func(string) { t.Error("Run served the page although the files exist") }}
	_, err := appmanifest.Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "--env-file "+envFile+" exists: --force") {
		t.Fatalf("Run over an existing env file: %v, want a refusal naming --force", err)
	}
	if b, _ := os.ReadFile(envFile); string(b) != old {
		t.Fatalf("the refused run changed the env file: %s", b)
	}
	cfg.Force, cfg.ReadyFunc = true, nil
	ready, done := start(context.Background(), cfg)
	browse(t, <-ready)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	b, _ := os.ReadFile(envFile)
	id := fmt.Sprint(r.res.AppID)
	wantStart := "# mine\nOPENAI_API_KEY=sk-kept\nGITHUB_APP_ID=" + id + "\nPRQ_ADMIN_TOKEN=kept-too\n\n# The GitHub App \"force test\""
	if !strings.HasPrefix(string(b), wantStart) || strings.Contains(string(b), "old-pem") || strings.Count(string(b), "GITHUB_APP_ID=") != 1 {
		t.Errorf("updated env file:\n%s\nwant it to start\n%s", b, wantStart)
	}
	if env := readEnv(t, envFile); env["GITHUB_APP_SLUG"] != "force-test" || env["GITHUB_PRIVATE_KEY_PATH"] != keyFile {
		t.Errorf("updated env file: %v", env)
	}
	if k, _ := os.ReadFile(keyFile); !strings.Contains(string(k), "BEGIN RSA PRIVATE KEY") || mode(t, envFile) != 0o600 {
		t.Errorf("key file %q, env file mode %o: want the new key, 600", k, mode(t, envFile))
	}
}

// TestExchangeRefused: when GitHub refuses the code, Run fails saying
// why, the browser is told, and nothing is written.
func TestExchangeRefused(t *testing.T) {
	fake := fakegithub.New(fakegithub.Config{})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	dir := t.TempDir()
	ready, done := start(context.Background(), appmanifest.Config{WebhookURL: "https://h.example/webhook", Name: "refused",
		GitHubURL: srv.URL, EnvFile: filepath.Join(dir, ".env"), KeyFile: filepath.Join(dir, "k.pem")})
	fake.FailFamily(fakegithub.FamilyApp, http.StatusNotFound)
	status, body := browse(t, <-ready)
	r := <-done
	if r.err == nil || !strings.Contains(r.err.Error(), "does not know the code") || status != http.StatusBadGateway || !strings.Contains(body, "does not know the code") {
		t.Fatalf("Run: %v; browser %d %s", r.err, status, body)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused exchange wrote %v", entries)
	}
}

// TestEndsWithoutGitHub: cancelled, or out of time, Run ends saying so
// and writes nothing. The page posts to github.com by default, with the
// webhook path and the callback filled in.
func TestEndsWithoutGitHub(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := start(ctx, appmanifest.Config{WebhookURL: "https://prq.example.org", EnvFile: filepath.Join(dir, ".env"), KeyFile: filepath.Join(dir, "k.pem")})
	pageURL := <-ready
	action, manifest := page(t, pageURL)
	if !strings.HasPrefix(action, "https://github.com/settings/apps/new?state=") || len(action) < len("https://github.com/settings/apps/new?state=")+32 {
		t.Errorf("form action %q, want github.com's settings/apps/new with a state", action)
	}
	var m struct {
		Name           string
		RedirectURL    string               `json:"redirect_url"`
		HookAttributes struct{ URL string } `json:"hook_attributes"`
	}
	if err := json.Unmarshal([]byte(manifest), &m); err != nil || m.Name != "prq" || m.RedirectURL != pageURL+"callback" || m.HookAttributes.URL != "https://prq.example.org/webhook" {
		t.Errorf("manifest on the page: %+v %v", m, err)
	}
	cancel()
	if r := <-done; r.err == nil || !strings.Contains(r.err.Error(), "interrupted") {
		t.Errorf("cancelled: %v, want interrupted", r.err)
	}
	_, done = start(context.Background(), appmanifest.Config{WebhookURL: "https://prq.example.org", EnvFile: filepath.Join(dir, ".env"),
		KeyFile: filepath.Join(dir, "k.pem"), Timeout: time.Millisecond})
	if r := <-done; r.err == nil || !strings.Contains(r.err.Error(), "no redirect from GitHub within 1ms") {
		t.Errorf("out of time: %v", r.err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("wrote %v", entries)
	}
}

// TestBadSettings: each bad setting is refused, named as its flag,
// before anything starts.
func TestBadSettings(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  appmanifest.Config
		want string
	}{
		{"no webhook URL", appmanifest.Config{}, "--webhook-url is required"},
		{"webhook URL without scheme", appmanifest.Config{WebhookURL: "prq.example.com/webhook"}, "--webhook-url \"prq.example.com/webhook\": want an http(s) URL"},
		{"not loopback", appmanifest.Config{WebhookURL: "https://h.example", Addr: "0.0.0.0:0"}, "--addr \"0.0.0.0:0\": want a loopback address"},
		{"bad org", appmanifest.Config{WebhookURL: "https://h.example", Org: "a/b"}, "--org \"a/b\" is not a GitHub organisation name"},
		{"bad GitHub URL", appmanifest.Config{WebhookURL: "https://h.example", GitHubURL: "github.com"}, "--github-url \"github.com\""},
		{"env file's directory missing", appmanifest.Config{WebhookURL: "https://h.example", EnvFile: "/nonexistent-prq/.env"}, "its directory /nonexistent-prq does not exist"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.ReadyFunc = func(string) { t.Error("Run started") }
			if tt.cfg.KeyFile == "" {
				tt.cfg.KeyFile = filepath.Join(t.TempDir(), "k.pem")
			}
			if tt.cfg.EnvFile == "" {
				tt.cfg.EnvFile = filepath.Join(t.TempDir(), ".env")
			}
			if _, err := appmanifest.Run(context.Background(), tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%v, want %q", err, tt.want)
			}
		})
	}
}

// TestTemplateIsTheRepositorysManifest: the embedded template is
// github-app-manifest.json.
func TestTemplateIsTheRepositorysManifest(t *testing.T) {
	b, err := os.ReadFile("../../github-app-manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, appmanifest.Template) {
		t.Error("internal/appmanifest/github-app-manifest.json differs from the repository's: cp github-app-manifest.json internal/appmanifest/")
	}
}

func ExampleFill() {
	m, err := appmanifest.Fill(appmanifest.Template, "prq-acme", "https://prq.acme.example/webhook", "http://127.0.0.1:8765/callback")
	if err != nil {
		panic(err)
	}
	var v struct {
		Name           string
		HookAttributes struct{ URL string } `json:"hook_attributes"`
		RedirectURL    string               `json:"redirect_url"`
		DefaultEvents  []string             `json:"default_events"`
	}
	json.Unmarshal(m, &v)
	fmt.Println(v.Name, v.HookAttributes.URL, v.RedirectURL, v.DefaultEvents)
	// Output: prq-acme https://prq.acme.example/webhook http://127.0.0.1:8765/callback [pull_request issue_comment pull_request_review_comment]
}
