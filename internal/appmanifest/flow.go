package appmanifest

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/golang-jwt/jwt/v4"
)

// flow is the local page and its callback for one run.
type flow struct {
	ctx      context.Context
	cfg      Config
	manifest []byte
	state    string
	action   string // GitHub's settings/apps/new, with the state

	once    sync.Once   // the first callback with the right state is the one
	started atomic.Bool // that callback began: Run waits for its outcome
	done    chan outcome
}

type outcome struct {
	res *Result
	err error
}

func newFlow(ctx context.Context, cfg Config, manifest []byte) (*flow, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("appmanifest: state: %w", err)
	}
	state := hex.EncodeToString(b)
	action := cfg.GitHubURL + "/settings/apps/new"
	if cfg.Org != "" {
		action = cfg.GitHubURL + "/organizations/" + url.PathEscape(cfg.Org) + "/settings/apps/new"
	}
	return &flow{ctx: ctx, cfg: cfg, manifest: manifest, state: state, action: action + "?state=" + state, done: make(chan outcome, 1)}, nil
}

func (f *flow) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/":
		f.page(w)
	case r.Method == http.MethodGet && r.URL.Path == "/callback":
		f.callback(w, r)
	default:
		http.NotFound(w, r)
	}
}

var pageHTML = template.Must(template.New("page").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>prq: register the GitHub App</title></head>
<body onload="document.getElementById('manifest').submit()">
<h1>Registering the GitHub App on {{.Where}}</h1>
<p>This page sends prq's App manifest to GitHub, which asks you to confirm (and lets you rename the App).</p>
<form id="manifest" method="post" action="{{.Action}}">
<input type="hidden" name="manifest" value="{{.Manifest}}">
<button type="submit">Continue to GitHub</button>
</form>
</body></html>
`))

var resultHTML = template.Must(template.New("result").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>prq: {{.Title}}</title></head>
<body><h1>{{.Title}}</h1><p>{{.Text}}</p>{{if .Link}}<p><a href="{{.Link}}">{{.Link}}</a></p>{{end}}</body></html>
`))

func (f *flow) page(w http.ResponseWriter) {
	where := f.cfg.GitHubURL + " for your account"
	if f.cfg.Org != "" {
		where = f.cfg.GitHubURL + " for the organisation " + f.cfg.Org
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	pageHTML.Execute(w, map[string]any{"Where": where, "Action": template.URL(f.action), "Manifest": string(f.manifest)})
}

func result(w http.ResponseWriter, status int, title, text, link string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	resultHTML.Execute(w, map[string]string{"Title": title, "Text": text, "Link": link})
}

// codeForm is what a manifest code may look like (GitHub's are hex);
// anything else is refused before it reaches a URL.
var codeForm = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,200}$`)

// callback takes GitHub's redirect: a wrong state is answered and
// ignored (the flow goes on waiting); the first right one ends the flow.
func (f *flow) callback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(f.state)) != 1 {
		result(w, http.StatusBadRequest, "This redirect is not the one prq is waiting for",
			"Its state does not match the page prq setup github served: start from the address it printed.", "")
		return
	}
	code := q.Get("code")
	if !codeForm.MatchString(code) {
		result(w, http.StatusBadRequest, "No code in GitHub's redirect", "GitHub's redirect carries a code; this one had none or a malformed one.", "")
		return
	}
	ran := false
	f.once.Do(func() {
		ran = true
		f.started.Store(true)
		res, err := f.finish(code)
		if err != nil {
			result(w, http.StatusBadGateway, "The App could not be set up", err.Error(), "")
		} else {
			text := fmt.Sprintf("GitHub App %q (id %d) is registered; its settings are in %s and its key in %s. Install it on the repositories to review:",
				res.Name, res.AppID, res.EnvFile, res.KeyFile)
			result(w, http.StatusOK, "The GitHub App is registered", text, res.InstallURL)
		}
		f.done <- outcome{res, err}
	})
	if !ran {
		result(w, http.StatusConflict, "Already done", "prq setup github has already taken GitHub's answer; see its output.", "")
	}
}

// finish exchanges the code and writes the files.
func (f *flow) finish(code string) (*Result, error) {
	conv, err := exchange(f.ctx, f.cfg.HTTPClient, f.cfg.APIURL, code)
	if err != nil {
		return nil, err
	}
	res := &Result{AppID: conv.ID, Slug: conv.Slug, Name: conv.Name, ClientID: conv.ClientID, Owner: conv.Owner.Login,
		HTMLURL: conv.HTMLURL, InstallURL: strings.TrimSuffix(conv.HTMLURL, "/") + "/installations/new",
		EnvFile: f.cfg.EnvFile, KeyFile: f.cfg.KeyFile, KeyPath: f.cfg.KeyPath, HasWebhookSecret: conv.WebhookSecret != nil,
		APIURL: f.cfg.APIURL, GitHubURL: f.cfg.GitHubURL}
	if err := write(f.cfg, conv, res); err != nil {
		return nil, fmt.Errorf("%w (GitHub registered App %q, id %d: generate a new private key in its settings, %s/settings/apps/%s, or delete it there and run this again)",
			err, conv.Slug, conv.ID, f.cfg.GitHubURL, conv.Slug)
	}
	return res, nil
}

// conversion is GitHub's answer to POST /app-manifests/{code}/conversions.
type conversion struct {
	ID       int64  `json:"id"`
	Slug     string `json:"slug"`
	Name     string `json:"name"`
	ClientID string `json:"client_id"`
	HTMLURL  string `json:"html_url"`
	Owner    struct {
		Login string `json:"login"`
	} `json:"owner"`
	WebhookSecret *string `json:"webhook_secret"`
	PEM           string  `json:"pem"`
}

// slugForm is an App's slug as GitHub makes them.
var slugForm = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// exchange trades the code for the App's credentials. Its errors never
// hold a secret.
func exchange(ctx context.Context, client *http.Client, apiURL, code string) (*conversion, error) {
	u := apiURL + "app-manifests/" + url.PathEscape(code) + "/conversions"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return nil, fmt.Errorf("appmanifest: exchange the code: %w", err)
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL holds the code
		}
		return nil, fmt.Errorf("appmanifest: exchange the code at %s: %v", apiURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("appmanifest: exchange the code: read GitHub's answer: %w", err)
	}
	switch resp.StatusCode {
	case http.StatusCreated:
	case http.StatusNotFound:
		return nil, fmt.Errorf("appmanifest: GitHub (%s) does not know the code: it was used already, is over an hour old, or is from another GitHub (check --github-url and --api-url)", apiURL)
	default:
		var e struct{ Message string }
		json.Unmarshal(body, &e)
		return nil, fmt.Errorf("appmanifest: exchanging the code, GitHub (%s) answered %d %q", apiURL, resp.StatusCode, oneLine(e.Message))
	}
	var c conversion
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, fmt.Errorf("appmanifest: GitHub's answer to the code exchange is not its JSON: %v", err)
	}
	return &c, c.check()
}

// check refuses an answer prq could not use, naming the field only.
func (c *conversion) check() error {
	switch {
	case c.ID <= 0:
		return errors.New("appmanifest: GitHub's answer has no App id")
	case !slugForm.MatchString(c.Slug):
		return fmt.Errorf("appmanifest: GitHub's answer has an unusable slug %q", c.Slug)
	case c.WebhookSecret != nil && strings.ContainsAny(*c.WebhookSecret, "'\n\r"):
		return errors.New("appmanifest: GitHub's webhook secret cannot be written to an env file (it holds a quote or a line break)")
	}
	if _, err := jwt.ParseRSAPrivateKeyFromPEM([]byte(c.PEM)); err != nil {
		return errors.New("appmanifest: GitHub's answer has no usable private key (pem)")
	}
	if u, err := url.Parse(c.HTMLURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("appmanifest: GitHub's answer has no usable html_url %q", c.HTMLURL)
	}
	return nil
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
