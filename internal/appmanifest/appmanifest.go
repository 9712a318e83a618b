package appmanifest

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Template is prq's App manifest: github-app-manifest.json at the
// repository's root (a test keeps this copy equal to it).
//
//go:embed github-app-manifest.json
var Template []byte

// Config configures one run of the flow.
type Config struct {
	// WebhookURL is where GitHub sends the App's webhooks: serve's
	// /webhook, reachable from GitHub. Required; a URL without a path
	// gets /webhook.
	WebhookURL string
	// Name is the App's name; the person may change it on GitHub's page
	// before creating the App. Defaults to the manifest's.
	Name string
	// Manifest is the manifest to fill in. Defaults to Template.
	Manifest []byte
	// GitHubURL is GitHub's web address. Defaults to https://github.com;
	// an Enterprise Server's is https://HOST.
	GitHubURL string
	// APIURL is GitHub's REST API. Defaults to https://api.github.com/
	// for github.com and GitHubURL + /api/v3/ for an Enterprise Server.
	APIURL string
	// Org registers the App for this organisation (its owners may);
	// empty registers it for the signed-in user.
	Org string
	// Addr is where the local page listens: a loopback address. Defaults
	// to 127.0.0.1:0 (a free port).
	Addr string
	// EnvFile gets the App's settings (GITHUB_APP_ID, GITHUB_APP_SLUG,
	// GITHUB_PRIVATE_KEY_PATH, GITHUB_WEBHOOK_SECRET, GITHUB_API_URL).
	// Defaults to .env.
	EnvFile string
	// KeyFile gets the App's private key. Defaults to
	// secrets/github-app.pem.
	KeyFile string
	// KeyPath is the GITHUB_PRIVATE_KEY_PATH written to EnvFile: where
	// prq will read the key. Defaults to /secrets/<name> when KeyFile is
	// in ./secrets (docker compose mounts it at /secrets), else to
	// KeyFile's absolute path.
	KeyPath string
	// Force replaces an existing KeyFile and updates an existing
	// EnvFile's GitHub settings in place (its other lines are kept).
	// Without it either file existing stops Run before anything starts.
	Force bool
	// Timeout is how long to wait for GitHub's redirect. Defaults to 15
	// minutes (GitHub's code itself lasts an hour).
	Timeout time.Duration
	// HTTPClient exchanges the code. Defaults to a client with a 30s
	// timeout.
	HTTPClient *http.Client
	// ReadyFunc is called with the local page's URL once it listens:
	// open it in a browser on this machine. Required.
	ReadyFunc func(pageURL string)
}

// Result is the registered App; it holds no secret.
type Result struct {
	AppID             int64
	Slug, Name        string
	ClientID          string
	Owner             string
	HTMLURL           string
	InstallURL        string
	EnvFile, KeyFile  string
	KeyPath           string
	HasWebhookSecret  bool   // false: GitHub sent none (set one in the App's settings)
	EnvFileUpdated    bool   // EnvFile existed and Force updated it
	APIURL, GitHubURL string // as used
}

// Defaults.
const (
	DefaultGitHubURL = "https://github.com"
	DefaultEnvFile   = ".env"
	DefaultKeyFile   = "secrets/github-app.pem"
	DefaultTimeout   = 15 * time.Minute
)

// orgName is a GitHub account name.
var orgName = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$`)

// Check fills in the defaults and reports the first bad setting, named
// as prq setup github's flag. Run calls it.
func (c *Config) Check() error {
	if c.Manifest == nil {
		c.Manifest = Template
	}
	if c.GitHubURL == "" {
		c.GitHubURL = DefaultGitHubURL
	}
	gh, err := httpURL("--github-url", c.GitHubURL)
	if err != nil {
		return err
	}
	gh.Path = strings.TrimSuffix(gh.Path, "/")
	c.GitHubURL = gh.String()
	if c.APIURL == "" {
		c.APIURL = c.GitHubURL + "/api/v3/"
		if gh.Host == "github.com" {
			c.APIURL = "https://api.github.com/"
		}
	}
	api, err := httpURL("--api-url", c.APIURL)
	if err != nil {
		return err
	}
	if !strings.HasSuffix(api.Path, "/") {
		api.Path += "/"
	}
	c.APIURL = api.String()
	hook, err := httpURL("--webhook-url", c.WebhookURL)
	if err != nil {
		return err
	}
	if hook.Path == "" || hook.Path == "/" {
		hook.Path = "/webhook"
	}
	c.WebhookURL = hook.String()
	if c.Org != "" && !orgName.MatchString(c.Org) {
		return fmt.Errorf("--org %q is not a GitHub organisation name", c.Org)
	}
	if c.Addr == "" {
		c.Addr = "127.0.0.1:0"
	}
	if host, _, err := net.SplitHostPort(c.Addr); err != nil || !loopback(host) {
		return fmt.Errorf("--addr %q: want a loopback address such as 127.0.0.1:0 (the page hands out the App's credentials)", c.Addr)
	}
	if c.EnvFile == "" {
		c.EnvFile = DefaultEnvFile
	}
	if c.KeyFile == "" {
		c.KeyFile = DefaultKeyFile
	}
	if c.KeyPath == "" {
		c.KeyPath, err = keyPath(c.KeyFile)
		if err != nil {
			return err
		}
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	return nil
}

func httpURL(flag, s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if s == "" {
		return nil, fmt.Errorf("%s is required", flag)
	}
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("%s %q: want an http(s) URL such as https://prq.example.com/webhook", flag, s)
	}
	return u, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// keyPath is where prq will read a key written to file: /secrets/<name>
// for a file in ./secrets (docker compose's mount), else its absolute path.
func keyPath(file string) (string, error) {
	if dir := filepath.Dir(filepath.Clean(file)); dir == "secrets" {
		return "/secrets/" + filepath.Base(file), nil
	}
	return filepath.Abs(file)
}

// Fill returns the manifest with the App's name (unless name is empty),
// webhook URL and redirect URL set; everything else is kept as it is.
func Fill(manifest []byte, name, webhookURL, redirectURL string) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(manifest, &m); err != nil {
		return nil, fmt.Errorf("appmanifest: the manifest is not a JSON object: %w", err)
	}
	if name != "" {
		m["name"] = name
	}
	hook, _ := m["hook_attributes"].(map[string]any)
	if hook == nil {
		hook = map[string]any{"active": true}
	}
	hook["url"] = webhookURL
	m["hook_attributes"] = hook
	m["redirect_url"] = redirectURL
	return json.MarshalIndent(m, "", "  ")
}

// Run runs the flow: it serves the page (ReadyFunc gets its URL), waits
// for GitHub's redirect, exchanges the code and writes the files. It
// ends when they are written, on a failure, when ctx ends, or after
// Timeout; ended before GitHub's redirect arrived, it writes nothing.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.ReadyFunc == nil {
		return nil, errors.New("appmanifest: ReadyFunc is required")
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if err := preflight(cfg); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("appmanifest: listen on %s: %w", cfg.Addr, err)
	}
	page := "http://" + ln.Addr().String() + "/"
	manifest, err := Fill(cfg.Manifest, cfg.Name, cfg.WebhookURL, page+"callback")
	if err != nil {
		ln.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	f, err := newFlow(ctx, cfg, manifest)
	if err != nil {
		ln.Close()
		return nil, err
	}
	srv := &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	cfg.ReadyFunc(page)
	select {
	case out := <-f.done:
		// let the browser's last page arrive before the server closes
		shut, stop := context.WithTimeout(context.Background(), 5*time.Second)
		defer stop()
		srv.Shutdown(shut)
		return out.res, out.err
	case <-ctx.Done():
		if f.started.Load() { // the exchange ends with ctx; its files are written or not
			out := <-f.done
			return out.res, out.err
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("appmanifest: no redirect from GitHub within %s: nothing was written; run it again", cfg.Timeout)
		}
		return nil, errors.New("appmanifest: interrupted before GitHub redirected back: nothing was written")
	}
}

// preflight refuses to start when a file would be replaced without
// Force, or cannot be written, so that no App is registered whose
// credentials have nowhere to go.
func preflight(cfg Config) error {
	for _, f := range []struct{ path, flag string }{{cfg.EnvFile, "--env-file"}, {cfg.KeyFile, "--key-file"}} {
		st, err := os.Stat(f.path)
		switch {
		case err == nil && st.IsDir():
			return fmt.Errorf("%s %s is a directory", f.flag, f.path)
		case err == nil && !cfg.Force:
			return fmt.Errorf("%s %s exists: --force replaces it (an env file keeps its other lines), or name another file with %s", f.flag, f.path, f.flag)
		case err != nil && !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("%s: %w", f.flag, err)
		}
	}
	if dir := filepath.Dir(cfg.EnvFile); dir != "." {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return fmt.Errorf("--env-file %s: its directory %s does not exist", cfg.EnvFile, dir)
		}
	}
	return nil
}
