package fakegithub

// GitHub's App manifest flow ("Registering a GitHub App from a
// manifest"): a browser POSTs a form whose `manifest` field is the App's
// JSON to /settings/apps/new (an App of the signed-in user) or
// /organizations/{org}/settings/apps/new, with `state` in the action's
// query; GitHub registers the App (here at once: the fake plays the
// person pressing "Create GitHub App") and redirects to the manifest's
// redirect_url with ?code=…&state=…. POST /app-manifests/{code}/conversions,
// unauthenticated, once and within an hour, answers 201 with the App
// and its credentials (pem, webhook_secret, client_secret). From then on
// the fake accepts the App's JWTs: GET /app, /app/installations and
// installation tokens answer as that App.

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// WebUser is the account signed in to the fake's web pages: it owns the
// Apps registered on /settings/apps/new.
const WebUser = "octocat"

// ManifestCodeTTL is how long a manifest code can be exchanged, as on
// GitHub.
const ManifestCodeTTL = time.Hour

// MaxAppNameChars is GitHub's limit on an App's name.
const MaxAppNameChars = 34

// appIdentity is an App whose JWTs the fake accepts.
type appIdentity struct {
	id                       int64
	slug, name, clientID     string
	owner, ownerType         string
	description, externalURL string
	permissions              map[string]string
	events                   []string
	created                  time.Time
	key                      *rsa.PublicKey
}

// apiJSON is the App as GET /app (GitHub's "integration") shows it.
func (a *appIdentity) apiJSON(r *http.Request) map[string]any {
	created := a.created.UTC().Format(time.RFC3339)
	return map[string]any{
		"id": a.id, "slug": a.slug, "node_id": "A_kwDO" + base64.RawStdEncoding.EncodeToString([]byte(strconv.FormatInt(a.id, 10))),
		"client_id": a.clientID, "owner": map[string]any{"login": a.owner, "id": ownerID(a.owner), "type": a.ownerType},
		"name": a.name, "description": a.description, "external_url": a.externalURL,
		"html_url":   webBase(r) + "/apps/" + a.slug,
		"created_at": created, "updated_at": created,
		"permissions": a.permissions, "events": a.events,
	}
}

func ownerID(login string) int64 {
	var id int64 = 1000
	for _, c := range login {
		id = id*31 + int64(c)
	}
	return id & 0xffffffff
}

// webBase is the fake's own web address as the request reached it
// (GitHub's html_url host).
func webBase(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// manifestApps are the Apps registered from a manifest and the codes
// that hand out their credentials.
type manifestApps struct {
	mu     sync.Mutex
	apps   map[int64]*appIdentity
	codes  map[string]*manifestCode
	nextID int64
}

// manifestCode is one registration's credentials, until exchanged.
type manifestCode struct {
	app                              *appIdentity
	pem, clientSecret, webhookSecret string
	hasHook                          bool
	expires                          time.Time
}

// configuredApp is the App of Config (AppID, PublicKey, AppSlug).
func (s *Server) configuredApp() *appIdentity {
	slug := strings.TrimSuffix(s.Bot(), "[bot]") // SetAppSlug's, as the bot writes
	return &appIdentity{id: s.cfg.AppID, slug: slug, name: slug, clientID: "Iv1.fake",
		owner: "prq-dev", ownerType: "Organization", externalURL: "https://github.com/prq-dev/prq",
		permissions: s.cfg.Permissions, events: s.cfg.Events, created: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC), key: s.cfg.PublicKey}
}

// appByIssuer returns the App a JWT's issuer names, or nil.
func (s *Server) appByIssuer(iss string) *appIdentity {
	id, err := strconv.ParseInt(iss, 10, 64)
	if err != nil {
		return nil
	}
	if id == s.cfg.AppID && s.cfg.PublicKey != nil {
		return s.configuredApp()
	}
	s.manifests.mu.Lock()
	defer s.manifests.mu.Unlock()
	return s.manifests.apps[id]
}

// webRoutes adds the fake's web pages of the manifest flow (not API
// routes: GitHub's REST description does not list them).
func (s *Server) webRoutes(m *http.ServeMux) {
	m.HandleFunc("POST /settings/apps/new", s.registerFromManifest)
	m.HandleFunc("POST /organizations/{org}/settings/apps/new", s.registerFromManifest)
}

// manifest is a GitHub App manifest's fields.
type manifest struct {
	Name           string `json:"name"`
	URL            string `json:"url"`
	Description    string `json:"description"`
	HookAttributes *struct {
		URL    string `json:"url"`
		Active *bool  `json:"active"`
	} `json:"hook_attributes"`
	RedirectURL           string            `json:"redirect_url"`
	CallbackURLs          []string          `json:"callback_urls"`
	SetupURL              string            `json:"setup_url"`
	Public                bool              `json:"public"`
	DefaultPermissions    map[string]string `json:"default_permissions"`
	DefaultEvents         []string          `json:"default_events"`
	RequestOAuthOnInstall bool              `json:"request_oauth_on_install"`
	SetupOnUpdate         bool              `json:"setup_on_update"`
}

// registerFromManifest is the form GitHub's "settings/apps/new" page
// takes: it validates the manifest, registers the App and redirects back
// with a code, or answers 422 with a page listing the problems.
func (s *Server) registerFromManifest(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	if err := r.ParseForm(); err != nil {
		manifestPage(w, http.StatusBadRequest, []string{"the form could not be read: " + err.Error()})
		return
	}
	raw := r.PostForm.Get("manifest")
	if raw == "" {
		manifestPage(w, http.StatusUnprocessableEntity, []string{"Manifest can't be blank (a form field named manifest)"})
		return
	}
	m, problems := parseManifest(raw)
	owner, ownerType := WebUser, "User"
	if org := r.PathValue("org"); org != "" {
		owner, ownerType = org, "Organization"
	}
	slug := appSlug(m.Name)
	if len(problems) == 0 && s.slugTaken(slug) {
		problems = append(problems, "Name is already in use")
	}
	if len(problems) > 0 {
		manifestPage(w, http.StatusUnprocessableEntity, problems)
		return
	}
	code, err := s.register(m, slug, owner, ownerType)
	if err != nil {
		manifestPage(w, http.StatusInternalServerError, []string{err.Error()})
		return
	}
	if m.RedirectURL == "" { // GitHub shows the new App's settings; no code leaves
		http.Redirect(w, r, "/settings/apps/"+slug, http.StatusFound)
		return
	}
	u, _ := url.Parse(m.RedirectURL) // parseManifest checked it
	q := u.Query()
	q.Set("code", code)
	if st := r.URL.Query().Get("state"); st != "" {
		q.Set("state", st)
	}
	u.RawQuery = q.Encode()
	http.Redirect(w, r, u.String(), http.StatusFound)
}

// parseManifest decodes a manifest and lists what GitHub would refuse.
func parseManifest(raw string) (manifest, []string) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &fields); err != nil {
		return manifest{}, []string{"Manifest is not a JSON object: " + err.Error()}
	}
	var m manifest
	var problems []string
	for k, v := range fields {
		one, _ := json.Marshal(map[string]json.RawMessage{k: v})
		if err := json.Unmarshal(one, &m); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %s is not the right type", k, v))
		}
	}
	sort.Strings(problems)
	switch n := len([]rune(m.Name)); {
	case strings.TrimSpace(m.Name) == "":
		problems = append(problems, "Name can't be blank")
	case n > MaxAppNameChars:
		problems = append(problems, fmt.Sprintf("Name is too long (maximum is %d characters)", MaxAppNameChars))
	case appSlug(m.Name) == "":
		problems = append(problems, "Name must contain a letter or a digit")
	}
	problems = append(problems, urlProblem("Url", m.URL, true)...)
	if h := m.HookAttributes; h != nil && (h.Active == nil || *h.Active) {
		problems = append(problems, urlProblem("Hook url", h.URL, true)...)
	}
	problems = append(problems, urlProblem("Redirect url", m.RedirectURL, false)...)
	problems = append(problems, urlProblem("Setup url", m.SetupURL, false)...)
	if len(m.CallbackURLs) > 10 {
		problems = append(problems, "Callback urls: at most 10")
	}
	for _, c := range m.CallbackURLs {
		problems = append(problems, urlProblem("Callback url", c, true)...)
	}
	return m, append(problems, permissionProblems(m.DefaultPermissions, m.DefaultEvents)...)
}

func urlProblem(name, s string, required bool) []string {
	if s == "" {
		if required {
			return []string{name + " can't be blank"}
		}
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return []string{fmt.Sprintf("%s %q is not a valid URL", name, s)}
	}
	return nil
}

// appPermissions are the App permissions and their levels, as GitHub's
// REST description (app-permissions, @octokit/openapi 23.0.2) lists them.
var appPermissions = map[string]string{
	"actions": "rw", "administration": "rw", "artifact_metadata": "rw", "attestations": "rw", "checks": "rw",
	"code_quality": "rw", "codespaces": "rw", "contents": "rw", "dependabot_secrets": "rw", "deployments": "rw",
	"discussions": "rw", "environments": "rw", "issues": "rw", "merge_queues": "rw", "metadata": "rw", "packages": "rw",
	"pages": "rw", "pull_requests": "rw", "repository_custom_properties": "rw", "repository_hooks": "rw",
	"repository_projects": "rwa", "secret_scanning_alerts": "rw", "secrets": "rw", "security_events": "rw",
	"single_file": "rw", "statuses": "rw", "vulnerability_alerts": "rw", "workflows": "w",
	"custom_properties_for_organizations": "rw", "members": "rw", "organization_administration": "rw",
	"organization_custom_roles": "rw", "organization_custom_org_roles": "rw", "organization_custom_properties": "rwa",
	"organization_copilot_seat_management": "rw", "organization_copilot_agent_settings": "rw",
	"organization_announcement_banners": "rw", "organization_events": "r", "organization_hooks": "rw",
	"organization_personal_access_tokens": "rw", "organization_personal_access_token_requests": "rw",
	"organization_plan": "r", "organization_projects": "rwa", "organization_packages": "rw", "organization_secrets": "rw",
	"organization_self_hosted_runners": "rw", "organization_user_blocking": "rw", "email_addresses": "rw",
	"followers": "rw", "git_ssh_keys": "rw", "gpg_keys": "rw", "interaction_limits": "rw", "profile": "w",
	"starring": "rw", "enterprise_custom_properties_for_organizations": "rwa",
}

// eventPermissions are the permissions, any one of which lets an App
// subscribe to a webhook event (GitHub's "webhook events and payloads";
// the events a pull-request tool asks for and their neighbours). An
// event not listed here is refused.
var eventPermissions = map[string][]string{
	"pull_request": {"pull_requests"}, "pull_request_review": {"pull_requests"},
	"pull_request_review_comment": {"pull_requests"}, "pull_request_review_thread": {"pull_requests"},
	"issue_comment": {"issues", "pull_requests"}, "issues": {"issues"}, "label": {"metadata"},
	"milestone": {"issues", "pull_requests"}, "check_run": {"checks"}, "check_suite": {"checks"},
	"push": {"contents"}, "create": {"contents"}, "delete": {"contents"}, "release": {"contents"},
	"commit_comment": {"contents"}, "status": {"statuses"}, "deployment": {"deployments"},
	"deployment_status": {"deployments"}, "workflow_run": {"actions"}, "workflow_job": {"actions"},
	"repository": {"metadata"}, "star": {"metadata"}, "watch": {"metadata"}, "public": {"metadata"},
	"merge_group": {"merge_queues"}, "discussion": {"discussions"}, "discussion_comment": {"discussions"},
}

func permissionProblems(perms map[string]string, events []string) []string {
	var problems []string
	names := make([]string, 0, len(perms))
	for p := range perms {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		levels, ok := appPermissions[p]
		lv := perms[p]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("Default permission %q is not a permission", p))
		case lv == "" || !strings.Contains(levels, lv[:1]) || (lv != "read" && lv != "write" && lv != "admin"):
			problems = append(problems, fmt.Sprintf("Default permission %s: %q is not one of its levels", p, lv))
		}
	}
	var unsupported []string
	for _, e := range events {
		ok := false
		for _, p := range eventPermissions[e] {
			ok = ok || perms[p] != "" || p == "metadata" // every App may read metadata
		}
		if !ok {
			unsupported = append(unsupported, e)
		}
	}
	if len(unsupported) > 0 {
		problems = append(problems, "Default events unsupported: "+strings.Join(unsupported, ", "))
	}
	return problems
}

// appSlug is GitHub's slug of an App's name: lower case, every run of
// other characters one hyphen.
func appSlug(name string) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(name) {
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(c)
			dash = false
			continue
		}
		dash = true
	}
	return b.String()
}

func (s *Server) slugTaken(slug string) bool {
	if slug == s.cfg.AppSlug {
		return true
	}
	s.manifests.mu.Lock()
	defer s.manifests.mu.Unlock()
	for _, a := range s.manifests.apps {
		if a.slug == slug {
			return true
		}
	}
	return false
}

// register creates the App with a new key and secrets, and returns the
// code that hands them out.
func (s *Server) register(m manifest, slug, owner, ownerType string) (string, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", fmt.Errorf("generate the App's key: %w", err)
	}
	perms := map[string]string{"metadata": "read"} // every App reads metadata
	for p, lv := range m.DefaultPermissions {
		perms[p] = lv
	}
	events := append([]string{}, m.DefaultEvents...)
	mc := &manifestCode{
		pem:          string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})),
		clientSecret: randomHex(20), webhookSecret: randomHex(20), hasHook: m.HookAttributes != nil,
		expires: s.cfg.NowFunc().Add(ManifestCodeTTL),
	}
	code := randomHex(20)
	ms := &s.manifests
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.apps == nil {
		ms.apps, ms.codes, ms.nextID = map[int64]*appIdentity{}, map[string]*manifestCode{}, 900000
	}
	ms.nextID++
	mc.app = &appIdentity{id: ms.nextID, slug: slug, name: m.Name, clientID: "Iv23li" + randomHex(7),
		owner: owner, ownerType: ownerType, description: m.Description, externalURL: m.URL,
		permissions: perms, events: events, created: s.cfg.NowFunc(), key: &key.PublicKey}
	ms.apps[mc.app.id] = mc.app
	ms.codes[code] = mc
	return code, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// convertManifest answers POST /app-manifests/{code}/conversions: 201
// with the App and its credentials, once; 404 for a code that is
// unknown, used or over an hour old.
func (s *Server) convertManifest(w http.ResponseWriter, r *http.Request) {
	code := r.PathValue("code")
	ms := &s.manifests
	ms.mu.Lock()
	mc, ok := ms.codes[code]
	if ok {
		delete(ms.codes, code)
	}
	ms.mu.Unlock()
	if !ok || !s.cfg.NowFunc().Before(mc.expires) {
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	body := mc.app.apiJSON(r)
	body["client_secret"], body["pem"], body["webhook_secret"] = mc.clientSecret, mc.pem, nil
	if mc.hasHook {
		body["webhook_secret"] = mc.webhookSecret
	}
	writeJSON(w, http.StatusCreated, body)
}

// manifestPage answers the browser with the problems GitHub's form
// would show.
func manifestPage(w http.ResponseWriter, status int, problems []string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprint(w, "<!doctype html><title>Register new GitHub App</title><h1>The App could not be registered</h1><ul>")
	for _, p := range problems {
		fmt.Fprintf(w, "<li>%s</li>", html.EscapeString(p))
	}
	fmt.Fprint(w, "</ul>")
}
