package fakegithub_test

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v4"

	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/ghapp"
)

// prqManifest is the repository's github-app-manifest.json with the
// flow's name, webhook URL and redirect URL filled in.
func prqManifest(t *testing.T, name, redirect string) string {
	t.Helper()
	b, err := os.ReadFile("../../github-app-manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["name"], m["redirect_url"] = name, redirect
	m["hook_attributes"] = map[string]any{"url": "https://prq.example.com/webhook", "active": true}
	out, _ := json.Marshal(m)
	return string(out)
}

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// postManifest plays the browser: it posts the form to the page and
// returns the answer.
func postManifest(t *testing.T, page, manifest string) (*http.Response, string) {
	t.Helper()
	resp, err := noRedirect.PostForm(page, url.Values{"manifest": {manifest}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func convert(t *testing.T, base, code string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(base+"/app-manifests/"+code+"/conversions", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// appGet GETs path as the App whose key pemText is.
func appGet(t *testing.T, base string, id int64, pemText, path string) (int, map[string]any) {
	t.Helper()
	key, err := jwt.ParseRSAPrivateKeyFromPEM([]byte(pemText))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, _ := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: jsonNumber(id),
		IssuedAt: jwt.NewNumericDate(now.Add(-time.Minute)), ExpiresAt: jwt.NewNumericDate(now.Add(5 * time.Minute))}).SignedString(key)
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

func jsonNumber(id int64) string { b, _ := json.Marshal(id); return string(b) }

// TestManifestFlow: the form redirects back with a code and the state;
// the code converts once into the App's credentials, in GitHub's shape;
// the App's key then signs JWTs the fake accepts, as that App.
func TestManifestFlow(t *testing.T) {
	for _, tt := range []struct{ name, page, prefix, owner, ownerType string }{
		{"user", "/settings/apps/new", "", fakegithub.WebUser, "User"},
		{"organisation, Enterprise path", "/organizations/acme/settings/apps/new", "/api/v3", "acme", "Organization"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fake := fakegithub.New(fakegithub.Config{})
			srv := httptest.NewServer(fake)
			defer srv.Close()
			resp, body := postManifest(t, srv.URL+tt.page+"?state=s%2F1", prqManifest(t, "My prq!", "http://127.0.0.1:9/callback?x=1"))
			if resp.StatusCode != http.StatusFound {
				t.Fatalf("form: %d %s, want 302", resp.StatusCode, body)
			}
			back, err := url.Parse(resp.Header.Get("Location"))
			if err != nil || back.Host != "127.0.0.1:9" || back.Path != "/callback" {
				t.Fatalf("redirected to %q, want the manifest's redirect_url", resp.Header.Get("Location"))
			}
			q := back.Query()
			if q.Get("state") != "s/1" || q.Get("x") != "1" || q.Get("code") == "" {
				t.Fatalf("redirect query %v: want the state, the redirect's own query and a code", q)
			}
			status, app := convert(t, srv.URL+tt.prefix, q.Get("code"))
			if status != http.StatusCreated {
				t.Fatalf("conversion: %d %v, want 201", status, app)
			}
			for _, f := range []string{"id", "slug", "node_id", "owner", "name", "description", "external_url", "html_url",
				"created_at", "updated_at", "permissions", "events", "client_id", "client_secret", "webhook_secret", "pem"} {
				if _, ok := app[f]; !ok {
					t.Errorf("conversion lacks %s (GitHub's description requires it)", f)
				}
			}
			owner, _ := app["owner"].(map[string]any)
			if app["slug"] != "my-prq" || app["name"] != "My prq!" || owner["login"] != tt.owner || owner["type"] != tt.ownerType ||
				app["html_url"] != srv.URL+"/apps/my-prq" || app["webhook_secret"] == nil {
				t.Errorf("conversion: slug %v name %v owner %v html_url %v", app["slug"], app["name"], owner, app["html_url"])
			}
			if status, again := convert(t, srv.URL, q.Get("code")); status != http.StatusNotFound || again["message"] != "Not Found" {
				t.Errorf("a used code: %d %v, want 404 Not Found", status, again)
			}
			id := int64(app["id"].(float64))
			status, got := appGet(t, srv.URL+tt.prefix, id, app["pem"].(string), "/app")
			perms, _ := got["permissions"].(map[string]any)
			if status != 200 || got["slug"] != "my-prq" || perms["pull_requests"] != "write" || perms["metadata"] != "read" {
				t.Fatalf("GET /app with the new key: %d %v", status, got)
			}
			// an installation of the new App mints tokens with its key
			fake.AddInstallation(77, tt.owner)
			gh, err := ghapp.New(id, []byte(app["pem"].(string)), srv.URL+tt.prefix, nil)
			if err != nil {
				t.Fatal(err)
			}
			tr, _ := gh.Transport(77)
			if _, err := tr.Token(context.Background()); err != nil {
				t.Fatalf("installation token for the new App: %v", err)
			}
		})
	}
}

// TestManifestCodeExpires: a code is refused an hour after the App was
// registered (a stepped clock).
func TestManifestCodeExpires(t *testing.T) {
	clk := &clock{t: time.Now()}
	fake := fakegithub.New(fakegithub.Config{NowFunc: clk.now})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	codeOf := func(name string) string {
		resp, body := postManifest(t, srv.URL+"/settings/apps/new", prqManifest(t, name, "http://127.0.0.1:9/cb"))
		u, err := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusFound || err != nil {
			t.Fatalf("form: %d %s", resp.StatusCode, body)
		}
		return u.Query().Get("code")
	}
	late, inTime := codeOf("late"), codeOf("in-time")
	clk.add(fakegithub.ManifestCodeTTL - time.Second)
	if status, _ := convert(t, srv.URL, inTime); status != http.StatusCreated {
		t.Errorf("a code a second inside its hour: %d, want 201", status)
	}
	clk.add(time.Second)
	if status, _ := convert(t, srv.URL, late); status != http.StatusNotFound {
		t.Errorf("a code an hour old: %d, want 404", status)
	}
	if status, _ := convert(t, srv.URL, "never-issued"); status != http.StatusNotFound {
		t.Errorf("an unknown code: %d, want 404", status)
	}
}

// TestManifestRefused: the page refuses, naming the problem, what GitHub
// refuses, and registers nothing.
func TestManifestRefused(t *testing.T) {
	fake := fakegithub.New(fakegithub.Config{AppSlug: "prq-bot"})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	good := func(edit func(m map[string]any)) string {
		var m map[string]any
		json.Unmarshal([]byte(prqManifest(t, "ok", "http://127.0.0.1:9/cb")), &m)
		edit(m)
		b, _ := json.Marshal(m)
		return string(b)
	}
	for _, tt := range []struct{ name, manifest, want string }{
		{"not JSON", "{", "not a JSON object"},
		{"no name", good(func(m map[string]any) { delete(m, "name") }), "Name can't be blank"},
		{"long name", good(func(m map[string]any) { m["name"] = strings.Repeat("n", 35) }), "Name is too long (maximum is 34 characters)"},
		{"name taken", good(func(m map[string]any) { m["name"] = "PRQ bot" }), "Name is already in use"},
		{"no url", good(func(m map[string]any) { delete(m, "url") }), "Url can't be blank"},
		{"no hook url", good(func(m map[string]any) { m["hook_attributes"] = map[string]any{"active": true} }), "Hook url can't be blank"},
		{"bad redirect", good(func(m map[string]any) { m["redirect_url"] = "127.0.0.1/cb" }), `Redirect url "127.0.0.1/cb" is not a valid URL`},
		{"public a string", good(func(m map[string]any) { m["public"] = "no" }), `public: "no" is not the right type`},
		{"unknown permission", good(func(m map[string]any) { m["default_permissions"] = map[string]any{"pulls": "write"} }), `Default permission "pulls" is not a permission`},
		{"bad level", good(func(m map[string]any) { m["default_permissions"] = map[string]any{"issues": "all"} }), `Default permission issues: "all" is not one of its levels`},
		{"event without permission", good(func(m map[string]any) { m["default_permissions"] = map[string]any{"issues": "write"} }),
			"Default events unsupported: pull_request, pull_request_review_comment"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := postManifest(t, srv.URL+"/settings/apps/new?state=x", tt.manifest)
			if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, htmlEscaped(tt.want)) {
				t.Errorf("%d %s, want 422 naming %q", resp.StatusCode, body, tt.want)
			}
		})
	}
	resp, body := postManifest(t, srv.URL+"/settings/apps/new", good(func(map[string]any) {}))
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("the untouched manifest after the refusals: %d %s, want 302", resp.StatusCode, body)
	}
}

func htmlEscaped(s string) string { return html.EscapeString(s) }

// FuzzManifestForm: whatever the form's manifest holds, the page answers
// a redirect or GitHub's list of problems, never a failure of its own.
func FuzzManifestForm(f *testing.F) {
	f.Add(`{"name":"a","url":"https://x.example","default_permissions":{"issues":"write"},"default_events":["issues"]}`)
	f.Add(`{"name":7,"hook_attributes":{"url":null},"default_permissions":{"metadata":""},"callback_urls":["x"]}`)
	f.Add(`{"name":"  ","url":"https://x.example","redirect_url":"http://[::1]:80/%zz"}`)
	fake := fakegithub.New(fakegithub.Config{})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	f.Fuzz(func(t *testing.T, manifest string) {
		resp, err := noRedirect.PostForm(srv.URL+"/settings/apps/new?state=s", url.Values{"manifest": {manifest}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound && resp.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("manifest %q: %d, want 302 or 422", manifest, resp.StatusCode)
		}
	})
}
