// Package fakegithub is a faithful fake of the part of GitHub's REST API
// prq uses, for tests, the demo and the benchmark. It is a real HTTP
// server: it verifies the App's RS256 JWT when minting installation
// tokens, refuses unknown or expired tokens, paginates PR files with real
// Link headers (3,000-file cap, nil patches for binaries), validates that
// review comments sit inside a hunk on the chosen side (422 otherwise),
// enforces the secondary limit on content-creating requests, honours an
// Enterprise base path (/api/v3), and records every write. It serves
// GitHub's App manifest flow too (manifest.go): the settings/apps/new
// form and the code's conversion, after which the new App's JWTs are
// accepted. It covers only those calls (any other route answers 404)
// and sends no webhooks: package traffic does.
package fakegithub

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v4"

	"github.com/prq-dev/prq/diff"
	"github.com/prq-dev/prq/fake/corpus"
)

// Config configures the fake.
type Config struct {
	// AppID and PublicKey verify the App's JWTs.
	AppID     int64
	PublicKey *rsa.PublicKey
	// TokenTTL is an installation token's life. Defaults to 1h.
	TokenTTL time.Duration
	// WritesPerPeriod is the secondary limit on content-creating requests
	// per installation. Defaults to 80 per minute; negative disables it.
	WritesPerPeriod int
	// WritePeriod defaults to one minute.
	WritePeriod time.Duration
	// LimitStatus is the secondary limit's status: 403 (default) or 429.
	LimitStatus int
	// NowFunc is the clock. Defaults to time.Now.
	NowFunc func() time.Time
	// AppSlug names the App in GET /app, and its writes are recorded as
	// "<slug>[bot]" (SetAppSlug changes it later). Defaults to "prq-bot".
	AppSlug string
	// Permissions are the App's installation permissions. Default to what
	// prq's manifest asks for (pull_requests, issues and checks: write;
	// contents and metadata: read). An endpoint whose permission is
	// missing answers 403 "Resource not accessible by integration".
	Permissions map[string]string
	// Events are the App's events, as GET /app reports them. Default to
	// github-app-manifest.json's.
	Events []string
}

// MaxBodyChars is GitHub's limit on comment, review and review comment
// bodies; longer ones are refused with 422.
const MaxBodyChars = 65536

// MaxCheckOutputChars caps a check run's output.summary and output.text;
// MaxAnnotations caps the annotations of one request.
const (
	MaxCheckOutputChars = 65535
	MaxAnnotations      = 50
)

// Server is the fake GitHub API.
type Server struct {
	cfg Config
	mux *http.ServeMux

	mu         sync.Mutex
	prs        map[string]*pullRequest
	tokens     map[string]token
	comments   map[int64]*IssueComment
	reviewCmt  map[int64]*ReviewComment
	reviews    []Review
	checks     map[int64]*CheckRun
	botLogin   atomic.Value // string: the App's bot login
	writes     map[int64][]time.Time
	attempts   []WriteAttempt
	stats      map[string]*PRStats
	nextID     int64
	failures   map[string]int // path substring -> status to answer once per entry
	faults     map[Family]familyFault
	familyHits map[Family]int
	recording  atomic.Bool
	requests   []Request
	installs   map[int64]string // installation id -> account login
	// refused installations: "deleted" (uninstalled: tokens 404) or
	// "suspended" (tokens 403); their tokens stop working (401)
	refused map[int64]string
	// repositories' files, for the contents API, and its reads
	repos        map[string]*repository
	contentReads map[string]int
	reactions    map[int64][]reaction // comment id -> its reactions, oldest first
	resolved     map[int64]bool       // root review comment id -> its thread resolved (graphql.go)
	// Apps registered from a manifest (manifest.go)
	manifests manifestApps
}

type token struct {
	inst    int64
	expires time.Time
}

type pullRequest struct {
	inst        int64
	owner, repo string
	number      int
	title, body string
	head, base  string
	author      string
	authorType  string
	state       string
	draft       bool
	baseRef     string
	labels      []string
	files       []corpus.File
	pushes      map[string][]corpus.File // "from...to" -> changed files
	parent      map[string]string        // a pushed head -> the head it replaced
}

// IssueComment is a PR conversation comment.
type IssueComment struct {
	ID     int64  `json:"id"`
	PR     string `json:"pr"`
	Body   string `json:"body"`
	Author string `json:"author"`
	Edits  int    `json:"edits"`
	// Created is when the comment was posted.
	Created time.Time `json:"created"`
}

// ReviewComment is a comment on a diff line.
type ReviewComment struct {
	ID        int64  `json:"id"`
	PR        string `json:"pr"`
	ReviewID  int64  `json:"review_id"`
	InReplyTo int64  `json:"in_reply_to,omitempty"`
	Path      string `json:"path"`
	Line      int    `json:"line"`
	StartLine int    `json:"start_line,omitempty"`
	Side      string `json:"side"`
	Body      string `json:"body"`
	Author    string `json:"author"`
	// Created is when the comment was posted.
	Created time.Time `json:"created"`
}

// Review is a submitted PR review.
type Review struct {
	ID       int64  `json:"id"`
	PR       string `json:"pr"`
	CommitID string `json:"commit_id"`
	Body     string `json:"body"`
	Event    string `json:"event"`
	Comments int    `json:"comments"`
	Author   string `json:"author"`
}

// PRStats counts the writes to one PR.
type PRStats struct {
	CommentsCreated int `json:"comments_created"`
	CommentsEdited  int `json:"comments_edited"`
	Reviews         int `json:"reviews"`
	ReviewComments  int `json:"review_comments"`
	Replies         int `json:"replies"`
	Duplicates      int `json:"duplicates"` // a body created twice on the same PR
	Rejected        int `json:"rejected"`   // 422s
	bodies          map[string]int
}

// BotLogin is the author the fake records for the App's writes until
// SetAppSlug names the App ("<slug>[bot]", as GitHub does), and BotID its
// user id.
const (
	BotLogin = "prq-bot[bot]"
	BotID    = 41898282
)

// SetAppSlug names the App: its writes are recorded as "<slug>[bot]".
func (s *Server) SetAppSlug(slug string) { s.botLogin.Store(slug + "[bot]") }

// Bot returns the login the App's writes are recorded under.
func (s *Server) Bot() string { return s.botLogin.Load().(string) }

// userJSON is a user object as GitHub sends it: the App's bot account is
// of type Bot; everyone else here is a User with an id from their login.
func (s *Server) userJSON(login string) map[string]any {
	if login == s.Bot() {
		return map[string]any{"login": login, "id": BotID, "type": "Bot"}
	}
	var id int64 = 1000
	for _, c := range login {
		id = id*31 + int64(c)
	}
	return map[string]any{"login": login, "id": id & 0xffffffff, "type": "User"}
}

// AddComment records a conversation comment by someone else (a test's
// user), as if they had posted it.
func (s *Server) AddComment(owner, repo string, n int, body, author string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	s.comments[s.nextID] = &IssueComment{ID: s.nextID, PR: key(owner, repo, n), Body: body, Author: author, Created: s.cfg.NowFunc()}
	return s.nextID
}

// AddReview records a review by someone else.
func (s *Server) AddReview(owner, repo string, n int, commit, body, author string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	s.reviews = append(s.reviews, Review{ID: s.nextID, PR: key(owner, repo, n), CommitID: commit, Body: body, Event: "COMMENT", Author: author})
	return s.nextID
}

// New returns a fake GitHub.
func New(cfg Config) *Server {
	if cfg.TokenTTL == 0 {
		cfg.TokenTTL = time.Hour
	}
	if cfg.WritesPerPeriod == 0 {
		cfg.WritesPerPeriod = 80
	}
	if cfg.WritePeriod == 0 {
		cfg.WritePeriod = time.Minute
	}
	if cfg.LimitStatus == 0 {
		cfg.LimitStatus = http.StatusForbidden
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	if cfg.AppSlug == "" {
		cfg.AppSlug = "prq-bot"
	}
	if cfg.Permissions == nil {
		cfg.Permissions = map[string]string{"pull_requests": "write", "issues": "write", "checks": "write", "contents": "read", "metadata": "read"}
	}
	if cfg.Events == nil {
		cfg.Events = []string{"pull_request", "issue_comment", "pull_request_review_comment"}
	}
	s := &Server{installs: map[int64]string{}, refused: map[int64]string{}, cfg: cfg, prs: map[string]*pullRequest{}, tokens: map[string]token{}, comments: map[int64]*IssueComment{}, checks: map[int64]*CheckRun{},
		reviewCmt: map[int64]*ReviewComment{}, writes: map[int64][]time.Time{}, stats: map[string]*PRStats{}, nextID: 1000,
		failures: map[string]int{}, faults: map[Family]familyFault{}, familyHits: map[Family]int{},
		repos: map[string]*repository{}, contentReads: map[string]int{}, reactions: map[int64][]reaction{}}
	s.botLogin.Store(cfg.AppSlug + "[bot]")
	m := http.NewServeMux()
	for _, rt := range s.routes() {
		m.HandleFunc(rt.Method+" "+rt.Path, s.family(rt.Family, rt.h))
	}
	m.HandleFunc("POST /graphql", s.graphql)     // GitHub's GraphQL API (not a REST route)
	m.HandleFunc("POST /api/graphql", s.graphql) // an Enterprise Server's
	m.HandleFunc("GET /_fake/stats", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, s.AllStats()) })
	s.pages(m)
	s.webRoutes(m)
	s.mux = m
	return s
}

// ServeHTTP serves the API at / and under the Enterprise prefix /api/v3.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sent := r.URL.Path
	if p, ok := strings.CutPrefix(r.URL.Path, "/api/v3"); ok {
		r2 := r.Clone(context.WithValue(r.Context(), enterpriseKey{}, true))
		r2.URL.Path = p
		r2.URL.RawPath = ""
		r = r2
	}
	w.Header().Set("X-GitHub-Media-Type", "github.v3")
	if !s.recording.Load() {
		s.mux.ServeHTTP(w, r)
		return
	}
	rec := s.record(w, r)
	rec.req.Path = sent // the Enterprise prefix included
	s.mux.ServeHTTP(rec, r)
	rec.done()
}

func key(owner, repo string, n int) string { return fmt.Sprintf("%s/%s#%d", owner, repo, n) }

// AddPR serves a pull request as installation inst's. owner/repo may
// override the corpus PR's repository (to spread PRs across tenants).
func (s *Server) AddPR(inst int64, owner, repo string, p corpus.PR) {
	if owner == "" {
		owner, repo = p.Owner(), p.Name()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prs[key(owner, repo, p.Number)] = &pullRequest{inst: inst, owner: owner, repo: repo, number: p.Number, title: p.Title, body: p.Body,
		head: p.HeadSHA, base: p.BaseSHA, baseRef: DefaultBranch, author: "octocat", authorType: "User", state: "open", files: p.Files,
		pushes: map[string][]corpus.File{}, parent: map[string]string{}}
}

// WriteAttempt is a request other than GET made with an installation's
// token, recorded when it arrives, whatever the answer (Refused: the
// installation was uninstalled or suspended then, so its token was
// refused).
type WriteAttempt struct {
	At           time.Time
	Installation int64
	Method, Path string
	Refused      bool
}

// WriteAttempts returns every write attempt so far, in order.
func (s *Server) WriteAttempts() []WriteAttempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]WriteAttempt(nil), s.attempts...)
}

// Push moves a PR's head, changing the given files (synchronize).
func (s *Server) Push(owner, repo string, n int, newHead string, changed []corpus.File) error {
	return s.PushTitled(owner, repo, n, newHead, "", changed)
}

// PushTitled is Push that also retitles the PR (title "" keeps it), in
// the same step: a reader sees the new head with the new title.
func (s *Server) PushTitled(owner, repo string, n int, newHead, title string, changed []corpus.File) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.prs[key(owner, repo, n)]
	if !ok {
		return fmt.Errorf("fakegithub: no PR %s", key(owner, repo, n))
	}
	p.pushes[p.head+"..."+newHead] = changed
	p.parent[newHead] = p.head
	byName := map[string]int{}
	for i, f := range p.files {
		byName[f.Filename] = i
	}
	for _, f := range changed {
		if i, ok := byName[f.Filename]; ok {
			p.files[i] = f
		} else {
			p.files = append(p.files, f)
		}
	}
	p.head = newHead
	if title != "" {
		p.title = title
	}
	return nil
}

// SetState opens or closes a PR ("open" or "closed").
func (s *Server) SetState(owner, repo string, n int, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.prs[key(owner, repo, n)]; ok {
		p.state = state
	}
}

// SetBase changes a PR's base commit (its base branch edited).
func (s *Server) SetBase(owner, repo string, n int, base string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.prs[key(owner, repo, n)]; ok {
		p.base = base
	}
}

// changedSince returns the files changed from base to head along the
// PR's pushes (GitHub compares any ancestor with a descendant), and
// whether base is an ancestor of head. Callers hold s.mu.
func (p *pullRequest) changedSince(base, head string) ([]corpus.File, bool) {
	if files, ok := p.pushes[base+"..."+head]; ok {
		return files, true
	}
	var chain [][]corpus.File
	for at, n := head, 0; n <= len(p.parent); n++ {
		prev, ok := p.parent[at]
		if !ok {
			return nil, false
		}
		chain = append(chain, p.pushes[prev+"..."+at])
		if prev == base {
			seen := map[string]int{}
			var out []corpus.File
			for i := len(chain) - 1; i >= 0; i-- { // oldest push first: the latest version wins
				for _, f := range chain[i] {
					if k, ok := seen[f.Filename]; ok {
						out[k] = f
						continue
					}
					seen[f.Filename] = len(out)
					out = append(out, f)
				}
			}
			return out, true
		}
		at = prev
	}
	return nil, false
}

// Remove deletes a PR (its API then answers 404).
func (s *Server) Remove(owner, repo string, n int) {
	s.mu.Lock()
	delete(s.prs, key(owner, repo, n))
	s.mu.Unlock()
}

// FailNext makes the next request whose path contains substr answer status.
func (s *Server) FailNext(substr string, status int) {
	s.mu.Lock()
	s.failures[substr] = status
	s.mu.Unlock()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// ghError answers in GitHub's error shape (the description's
// basic-error: message, documentation_url, status as a string).
func ghError(w http.ResponseWriter, status int, msg string, errs ...string) {
	body := map[string]any{"message": msg, "documentation_url": "https://docs.github.com/rest", "status": strconv.Itoa(status)}
	if len(errs) > 0 {
		body["errors"] = errs
	}
	writeJSON(w, status, body)
}

// validationFailed answers 422 the way GitHub does for a field it refuses.
func validationFailed(w http.ResponseWriter, resource, field, msg string) {
	writeJSON(w, 422, map[string]any{"message": "Validation Failed", "documentation_url": "https://docs.github.com/rest",
		"errors": []any{map[string]any{"resource": resource, "code": "custom", "field": field, "message": msg}}})
}

// tooLong reports whether body is over GitHub's limit, answering 422 if so.
func (s *Server) tooLong(w http.ResponseWriter, k, resource, body string) bool {
	if utf8.RuneCountInString(body) <= MaxBodyChars {
		return false
	}
	s.mu.Lock()
	s.statsOf(k).Rejected++
	s.mu.Unlock()
	validationFailed(w, resource, "body", fmt.Sprintf("body is too long (maximum is %d characters)", MaxBodyChars))
	return true
}

// needs refuses a request the App's permissions do not cover.
func (s *Server) needs(perm string, h handler) handler {
	return func(w http.ResponseWriter, r *http.Request, p *pullRequest) {
		want := "read"
		if r.Method != http.MethodGet {
			want = "write"
		}
		have := s.cfg.Permissions[perm]
		if have == "" || (want == "write" && have != "write") {
			ghError(w, 403, "Resource not accessible by integration")
			return
		}
		h(w, r, p)
	}
}

func (s *Server) accessToken(w http.ResponseWriter, r *http.Request) {
	inst, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		ghError(w, 404, "Not Found")
		return
	}
	app, msg := s.jwtApp(r)
	if msg != "" {
		ghError(w, 401, msg)
		return
	}
	s.mu.Lock()
	why := s.refused[inst]
	s.mu.Unlock()
	switch why {
	case "deleted":
		ghError(w, 404, "Not Found")
		return
	case "suspended":
		ghError(w, 403, "This installation has been suspended")
		return
	}
	now := s.cfg.NowFunc()
	b := make([]byte, 16)
	rand.Read(b)
	tok := "ghs_" + hex.EncodeToString(b)
	exp := now.Add(s.cfg.TokenTTL)
	s.mu.Lock()
	s.tokens[tok] = token{inst: inst, expires: exp}
	s.mu.Unlock()
	writeJSON(w, 201, map[string]any{"token": tok, "expires_at": exp.UTC().Format(time.RFC3339), "permissions": app.permissions})
}

// jwtApp checks the App's JWT as GitHub does and returns the App it is
// for: the configured App, or one registered from a manifest (its
// issuer). The message is GitHub's when the token is refused.
func (s *Server) jwtApp(r *http.Request) (*appIdentity, string) {
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nil, "A JSON web token could not be decoded"
	}
	now := s.cfg.NowFunc()
	claims := jwt.RegisteredClaims{}
	parser := jwt.NewParser(jwt.WithoutClaimsValidation())
	var app *appIdentity
	_, err := parser.ParseWithClaims(raw, &claims, func(t *jwt.Token) (any, error) {
		if t.Method.Alg() != "RS256" {
			return nil, fmt.Errorf("unexpected alg %s", t.Method.Alg())
		}
		app = s.appByIssuer(claims.Issuer)
		if app == nil { // the configured key still decides "could not be decoded"
			return s.cfg.PublicKey, nil
		}
		return app.key, nil
	})
	switch {
	case err != nil:
		return nil, "A JSON web token could not be decoded"
	case app == nil:
		return nil, "'Issuer' claim ('iss') must be an Integer"
	case claims.IssuedAt == nil || claims.ExpiresAt == nil:
		return nil, "Missing 'issued at' or 'expiration time' claim"
	case claims.IssuedAt.After(now.Add(60 * time.Second)):
		return nil, "'Issued at' claim ('iat') must be an Integer representing a time in the past"
	case !claims.ExpiresAt.After(now):
		return nil, "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires"
	case claims.ExpiresAt.Sub(claims.IssuedAt.Time) > 10*time.Minute+time.Second:
		return nil, "'Expiration time' claim ('exp') is too far in the future"
	}
	return app, ""
}

// Uninstall removes an installation as GitHub does when the App is
// uninstalled: minting its token answers 404 and its tokens stop
// working. Suspend answers 403 instead; Reinstall undoes either.
func (s *Server) Uninstall(id int64) { s.refuse(id, "deleted") }

// Suspend suspends an installation (see Uninstall).
func (s *Server) Suspend(id int64) { s.refuse(id, "suspended") }

// Reinstall makes an uninstalled or suspended installation work again.
func (s *Server) Reinstall(id int64) { s.refuse(id, "") }

func (s *Server) refuse(id int64, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if why == "" {
		delete(s.refused, id)
		return
	}
	s.refused[id] = why
}

// AddInstallation makes an installation visible in GET /app/installations
// (installations of added PRs are visible too).
func (s *Server) AddInstallation(id int64, account string) {
	s.mu.Lock()
	s.installs[id] = account
	s.mu.Unlock()
}

// getApp answers GET /app (authenticated as the App) in GitHub's shape.
func (s *Server) getApp(w http.ResponseWriter, r *http.Request) {
	app, msg := s.jwtApp(r)
	if msg != "" {
		ghError(w, 401, msg)
		return
	}
	body := app.apiJSON(r)
	body["installations_count"] = len(s.installations())
	writeJSON(w, 200, body)
}

// installations returns every installation id with its account, by id.
func (s *Server) installations() [][2]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := map[int64]string{}
	for _, p := range s.prs {
		all[p.inst] = p.owner
	}
	for id, acct := range s.installs {
		all[id] = acct
	}
	out := make([][2]any, 0, len(all))
	for id, acct := range all {
		out = append(out, [2]any{id, acct})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0].(int64) < out[j][0].(int64) })
	return out
}

// listInstallations answers GET /app/installations (authenticated as the
// App), paginated with per_page and page as on GitHub.
func (s *Server) listInstallations(w http.ResponseWriter, r *http.Request) {
	app, msg := s.jwtApp(r)
	if msg != "" {
		ghError(w, 401, msg)
		return
	}
	perPage, page := paging(r)
	all := s.installations()
	lo, hi := min((page-1)*perPage, len(all)), min(page*perPage, len(all))
	created := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC).Format(time.RFC3339)
	out := []map[string]any{}
	for _, in := range all[lo:hi] {
		id, acct := in[0].(int64), in[1].(string)
		out = append(out, map[string]any{
			"id": id, "app_id": app.id, "app_slug": app.slug, "target_id": id, "target_type": "Organization",
			"account":              map[string]any{"login": acct, "id": id, "type": "Organization"},
			"repository_selection": "all", "permissions": app.permissions, "events": app.events,
			"html_url":   fmt.Sprintf("https://github.com/organizations/%s/settings/installations/%d", acct, id),
			"created_at": created, "updated_at": created, "suspended_at": nil,
		})
	}
	if hi < len(all) {
		next := *r.URL
		q := next.Query()
		q.Set("page", strconv.Itoa(page+1))
		next.RawQuery = q.Encode()
		w.Header().Set("Link", fmt.Sprintf("<%s>; rel=\"next\"", next.String()))
	}
	writeJSON(w, 200, out)
}

type handler func(w http.ResponseWriter, r *http.Request, p *pullRequest)

// auth checks the installation token and finds the PR (or repository)
// the path names; a token of another installation sees 404, as on GitHub.
func (s *Server) auth(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		tok, ok := strings.CutPrefix(a, "token ")
		if !ok {
			tok, ok = strings.CutPrefix(a, "Bearer ")
		}
		s.mu.Lock()
		t, known := s.tokens[tok]
		if known && r.Method != http.MethodGet {
			_, refused := s.refused[t.inst]
			s.attempts = append(s.attempts, WriteAttempt{At: s.cfg.NowFunc(), Installation: t.inst, Method: r.Method, Path: r.URL.Path, Refused: refused})
		}
		for sub, status := range s.failures {
			if strings.Contains(r.URL.Path, sub) {
				delete(s.failures, sub)
				s.mu.Unlock()
				ghError(w, status, http.StatusText(status))
				return
			}
		}
		s.mu.Unlock()
		if !ok || !known {
			ghError(w, 401, "Bad credentials")
			return
		}
		s.mu.Lock()
		_, refused := s.refused[t.inst]
		s.mu.Unlock()
		if !t.expires.After(s.cfg.NowFunc()) || refused {
			ghError(w, 401, "Bad credentials")
			return
		}
		owner, repo := r.PathValue("owner"), r.PathValue("repo")
		var p *pullRequest
		s.mu.Lock()
		if n, err := strconv.Atoi(r.PathValue("n")); err == nil {
			p = s.prs[key(owner, repo, n)]
		} else {
			for _, q := range s.prs {
				if q.owner == owner && q.repo == repo {
					p = q
					break
				}
			}
		}
		if rp := s.repos[owner+"/"+repo]; p == nil && r.PathValue("n") == "" && rp != nil {
			p = &pullRequest{inst: rp.inst, owner: owner, repo: repo} // a repository without pull requests
		}
		s.mu.Unlock()
		if p == nil || p.inst != t.inst {
			ghError(w, 404, "Not Found")
			return
		}
		h(w, r, p)
	}
}

// write applies the secondary limit on content-creating requests.
func (s *Server) write(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request, p *pullRequest) {
		if s.cfg.WritesPerPeriod > 0 {
			now := s.cfg.NowFunc()
			s.mu.Lock()
			ws := s.writes[p.inst]
			cut := 0
			for cut < len(ws) && now.Sub(ws[cut]) >= s.cfg.WritePeriod {
				cut++
			}
			ws = ws[cut:]
			if len(ws) >= s.cfg.WritesPerPeriod {
				retry := s.cfg.WritePeriod - now.Sub(ws[0])
				s.writes[p.inst] = ws
				s.mu.Unlock()
				w.Header().Set("Retry-After", strconv.Itoa(int(retry.Seconds())+1))
				w.Header().Set("X-RateLimit-Remaining", "4000")
				writeJSON(w, s.cfg.LimitStatus, map[string]any{
					"message":           "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
					"documentation_url": "https://docs.github.com/rest/overview/resources-in-the-rest-api#secondary-rate-limits"})
				return
			}
			s.writes[p.inst] = append(ws, now)
			s.mu.Unlock()
		}
		if !s.validBody(w, r, key(p.owner, p.repo, p.number)) {
			return
		}
		h(w, r, p)
	}
}

func (s *Server) prJSON(p *pullRequest) map[string]any {
	return map[string]any{
		"number": p.number, "state": p.state, "draft": p.draft, "title": p.title, "body": p.body,
		"user":          map[string]any{"login": p.author, "type": p.authorType},
		"head":          map[string]any{"sha": p.head, "ref": "feature", "repo": map[string]any{"name": p.repo, "owner": map[string]any{"login": p.owner}}},
		"base":          map[string]any{"sha": p.base, "ref": p.baseRef, "repo": map[string]any{"name": p.repo, "owner": map[string]any{"login": p.owner}}},
		"labels":        labelsJSON(p.owner, p.repo, p.labels),
		"changed_files": len(p.files),
	}
}

func (s *Server) getPR(w http.ResponseWriter, r *http.Request, p *pullRequest) {
	s.mu.Lock()
	body := s.prJSON(p)
	s.mu.Unlock()
	writeJSON(w, 200, body)
}

func fileJSON(owner, repo string, f corpus.File) map[string]any {
	m := map[string]any{"sha": "0000000000000000000000000000000000000000", "filename": f.Filename, "status": f.Status,
		"additions": f.Additions, "deletions": f.Deletions, "changes": f.Changes,
		"blob_url": fmt.Sprintf("https://github.com/%s/%s/blob/HEAD/%s", owner, repo, f.Filename)}
	if f.Patch != nil {
		m["patch"] = *f.Patch
	}
	return m
}

// MaxCompareFiles is GitHub's cap on the files of one comparison.
const MaxCompareFiles = 300

// MaxFiles is GitHub's cap on listed PR files.
const MaxFiles = 3000

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, p *pullRequest) {
	perPage, page := paging(r)
	s.mu.Lock()
	files := p.files
	if len(files) > MaxFiles {
		files = files[:MaxFiles]
	}
	total := len(files)
	lo := min((page-1)*perPage, total)
	hi := min(lo+perPage, total)
	out := make([]any, 0, hi-lo)
	for _, f := range files[lo:hi] {
		out = append(out, fileJSON(p.owner, p.repo, f))
	}
	s.mu.Unlock()
	last := max(1, (total+perPage-1)/perPage)
	if link := linkHeader(r, perPage, page, last); link != "" {
		w.Header().Set("Link", link)
	}
	writeJSON(w, 200, out)
}

// linkHeader builds GitHub's Link header: next and last, prev and first.
func linkHeader(r *http.Request, perPage, page, last int) string {
	u := url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path}
	if r.TLS != nil {
		u.Scheme = "https"
	}
	at := func(n int) string {
		q := url.Values{"per_page": {strconv.Itoa(perPage)}, "page": {strconv.Itoa(n)}}
		u.RawQuery = q.Encode()
		return "<" + u.String() + ">"
	}
	var parts []string
	if page > 1 {
		parts = append(parts, at(page-1)+`; rel="prev"`)
	}
	if page < last {
		parts = append(parts, at(page+1)+`; rel="next"`, at(last)+`; rel="last"`)
	}
	if page > 1 {
		parts = append(parts, at(1)+`; rel="first"`)
	}
	return strings.Join(parts, ", ")
}

func (s *Server) compare(w http.ResponseWriter, r *http.Request, p *pullRequest) {
	base, head, ok := strings.Cut(r.PathValue("basehead"), "...")
	if !ok {
		ghError(w, 404, "Not Found")
		return
	}
	page := 1
	if v, err := strconv.Atoi(r.URL.Query().Get("page")); err == nil && v > 0 {
		page = v
	}
	s.mu.Lock()
	changed, known := p.changedSince(base, head)
	// GitHub lists a comparison's files on its first page only, at most
	// MaxCompareFiles for the whole comparison; later pages page commits
	files := []any{}
	if page == 1 {
		for _, f := range changed[:min(len(changed), MaxCompareFiles)] {
			files = append(files, fileJSON(p.owner, p.repo, f))
		}
	}
	s.mu.Unlock()
	if !known {
		ghError(w, 404, "No common ancestor between "+base+" and "+head+".")
		return
	}
	writeJSON(w, 200, map[string]any{"status": "ahead", "ahead_by": 1, "total_commits": 1, "files": files})
}

func (s *Server) statsOf(pr string) *PRStats {
	st, ok := s.stats[pr]
	if !ok {
		st = &PRStats{bodies: map[string]int{}}
		s.stats[pr] = st
	}
	return st
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil || json.Unmarshal(b, v) != nil {
		ghError(w, 400, "Problems parsing JSON")
		return false
	}
	return true
}

func (s *Server) listComments(w http.ResponseWriter, r *http.Request, p *pullRequest) {
	k := key(p.owner, p.repo, p.number)
	s.mu.Lock()
	var ids []int64
	for id, c := range s.comments {
		if c.PR == k {
			ids = append(ids, id)
		}
	}
	out := []any{}
	for _, id := range pageOf(w, r, ids) {
		c := s.comments[id]
		out = append(out, map[string]any{"id": c.ID, "body": c.Body, "user": s.userJSON(c.Author)})
	}
	s.mu.Unlock()
	writeJSON(w, 200, out)
}

func (s *Server) createComment(w http.ResponseWriter, r *http.Request, p *pullRequest) {
	var in struct{ Body string }
	if !readJSON(w, r, &in) {
		return
	}
	if strings.TrimSpace(in.Body) == "" {
		ghError(w, 422, "Validation Failed", "body cannot be blank")
		return
	}
	k := key(p.owner, p.repo, p.number)
	if s.tooLong(w, k, "IssueComment", in.Body) {
		return
	}
	s.mu.Lock()
	s.nextID++
	c := &IssueComment{ID: s.nextID, PR: k, Body: in.Body, Author: s.Bot(), Created: s.cfg.NowFunc()}
	s.comments[c.ID] = c
	st := s.statsOf(k)
	st.CommentsCreated++
	if st.bodies[in.Body]++; st.bodies[in.Body] > 1 {
		st.Duplicates++
	}
	s.mu.Unlock()
	writeJSON(w, 201, map[string]any{"id": c.ID, "body": c.Body, "user": s.userJSON(c.Author)})
}

func (s *Server) editComment(w http.ResponseWriter, r *http.Request, p *pullRequest) {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	var in struct{ Body string }
	if !readJSON(w, r, &in) {
		return
	}
	if s.tooLong(w, key(p.owner, p.repo, p.number), "IssueComment", in.Body) {
		return
	}
	s.mu.Lock()
	c, ok := s.comments[id]
	if ok && c.Author != s.Bot() {
		s.mu.Unlock()
		ghError(w, 403, "Resource not accessible by integration") // an App edits only its own comments
		return
	}
	if ok {
		c.Body = in.Body
		c.Edits++
		s.statsOf(c.PR).CommentsEdited++
	}
	s.mu.Unlock()
	if !ok {
		ghError(w, 404, "Not Found")
		return
	}
	writeJSON(w, 200, map[string]any{"id": c.ID, "body": c.Body})
}

type reviewIn struct {
	CommitID string `json:"commit_id"`
	Body     string `json:"body"`
	Event    string `json:"event"`
	Comments []struct {
		Path      string `json:"path"`
		Body      string `json:"body"`
		Line      *int   `json:"line"`
		Side      string `json:"side"`
		StartLine *int   `json:"start_line"`
		StartSide string `json:"start_side"`
		Position  *int   `json:"position"`
	} `json:"comments"`
}

func (s *Server) createReview(w http.ResponseWriter, r *http.Request, p *pullRequest) {
	var in reviewIn
	if !readJSON(w, r, &in) {
		return
	}
	k := key(p.owner, p.repo, p.number)
	if s.tooLong(w, k, "PullRequestReview", in.Body) {
		return
	}
	for _, c := range in.Comments {
		if s.tooLong(w, k, "PullRequestReviewComment", c.Body) {
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	reject := func(msg string) {
		s.statsOf(k).Rejected++
		ghError(w, 422, "Unprocessable Entity", msg)
	}
	if in.CommitID != "" && in.CommitID != p.head {
		reject("commit_id is not part of the pull request")
		return
	}
	patches := map[string]*diff.Patch{}
	for _, f := range p.files {
		if f.Patch != nil {
			if d, err := diff.Parse(*f.Patch); err == nil {
				patches[f.Filename] = d
			}
		}
	}
	for _, c := range in.Comments {
		if c.Position != nil && (c.Line != nil || c.StartLine != nil) {
			reject("position cannot be combined with line or start_line")
			return
		}
		if c.Position != nil {
			continue // deprecated form; prq never sends it
		}
		d, ok := patches[c.Path]
		if !ok {
			reject("Path could not be resolved")
			return
		}
		if c.Line == nil {
			reject("line is required")
			return
		}
		side := diff.Side(c.Side)
		if side == "" {
			side = diff.Right
		}
		if side != diff.Left && side != diff.Right {
			reject("side must be LEFT or RIGHT")
			return
		}
		if !d.Has(side, *c.Line) {
			reject("Pull request review thread line must be part of the diff")
			return
		}
		if c.StartLine != nil {
			ss := diff.Side(c.StartSide)
			if ss == "" {
				ss = side
			}
			if *c.StartLine >= *c.Line || !d.Has(ss, *c.StartLine) || d.HunkOf(ss, *c.StartLine) != d.HunkOf(side, *c.Line) {
				reject("Pull request review thread start line must be part of the same hunk as the line")
				return
			}
		}
	}
	s.nextID++
	rv := Review{ID: s.nextID, PR: k, CommitID: p.head, Body: in.Body, Event: in.Event, Comments: len(in.Comments), Author: s.Bot()}
	s.reviews = append(s.reviews, rv)
	st := s.statsOf(k)
	st.Reviews++
	st.ReviewComments += len(in.Comments)
	if st.bodies["review:"+in.Body]++; st.bodies["review:"+in.Body] > 1 {
		st.Duplicates++
	}
	for _, c := range in.Comments {
		s.nextID++
		rc := &ReviewComment{ID: s.nextID, PR: k, ReviewID: rv.ID, Path: c.Path, Line: *c.Line, Side: c.Side, Body: c.Body, Author: s.Bot()}
		if c.StartLine != nil {
			rc.StartLine = *c.StartLine
		}
		s.reviewCmt[rc.ID] = rc
	}
	writeJSON(w, 200, map[string]any{"id": rv.ID, "state": "COMMENTED", "commit_id": p.head, "body": rv.Body, "user": s.userJSON(rv.Author)})
}

func (s *Server) listReviews(w http.ResponseWriter, r *http.Request, p *pullRequest) {
	k := key(p.owner, p.repo, p.number)
	s.mu.Lock()
	out := []any{}
	for _, rv := range s.reviews {
		if rv.PR == k {
			out = append(out, map[string]any{"id": rv.ID, "body": rv.Body, "commit_id": rv.CommitID, "state": "COMMENTED", "user": s.userJSON(rv.Author)})
		}
	}
	s.mu.Unlock()
	writeJSON(w, 200, out)
}

// listReviewComments is GET .../pulls/{n}/comments: the PR's review
// comments, replies included, oldest first, paginated like GitHub (30 a
// page by default, at most 100).
func (s *Server) listReviewComments(w http.ResponseWriter, r *http.Request, p *pullRequest) {
	k := key(p.owner, p.repo, p.number)
	s.mu.Lock()
	var ids []int64
	for id, c := range s.reviewCmt {
		if c.PR == k {
			ids = append(ids, id)
		}
	}
	out := []any{}
	for _, id := range pageOf(w, r, ids) {
		c := s.reviewCmt[id]
		m := map[string]any{"id": c.ID, "body": c.Body, "path": c.Path, "line": c.Line, "side": c.Side, "user": s.userJSON(c.Author)}
		if c.InReplyTo != 0 {
			m["in_reply_to_id"] = c.InReplyTo
		}
		out = append(out, m)
	}
	s.mu.Unlock()
	writeJSON(w, 200, out)
}

// AddReviewComment records a human's diff comment (for chat tests).
func (s *Server) AddReviewComment(owner, repo string, n int, path string, line int, body, author string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	s.reviewCmt[s.nextID] = &ReviewComment{ID: s.nextID, PR: key(owner, repo, n), Path: path, Line: line, Side: "RIGHT", Body: body, Author: author}
	return s.nextID
}

// createReviewComment is POST .../pulls/{n}/comments: a reply when
// in_reply_to is set (go-github's CreateCommentInReplyTo), else a single
// line comment validated against the diff.
func (s *Server) createReviewComment(w http.ResponseWriter, r *http.Request, p *pullRequest) {
	var in struct {
		Body      string `json:"body"`
		InReplyTo int64  `json:"in_reply_to"`
		CommitID  string `json:"commit_id"`
		Path      string `json:"path"`
		Line      int    `json:"line"`
		Side      string `json:"side"`
	}
	if !readJSON(w, r, &in) {
		return
	}
	k := key(p.owner, p.repo, p.number)
	if s.tooLong(w, k, "PullRequestReviewComment", in.Body) {
		return
	}
	if in.InReplyTo != 0 {
		s.replyTo(w, p, in.InReplyTo, in.Body)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var d *diff.Patch
	for _, f := range p.files {
		if f.Filename == in.Path && f.Patch != nil {
			d, _ = diff.Parse(*f.Patch)
		}
	}
	side := diff.Side(in.Side)
	if side == "" {
		side = diff.Right
	}
	if d == nil || !d.Has(side, in.Line) {
		s.statsOf(k).Rejected++
		ghError(w, 422, "Unprocessable Entity", "Pull request review thread line must be part of the diff")
		return
	}
	s.nextID++
	rc := &ReviewComment{ID: s.nextID, PR: k, Path: in.Path, Line: in.Line, Side: string(side), Body: in.Body, Author: s.Bot()}
	s.reviewCmt[rc.ID] = rc
	s.statsOf(k).ReviewComments++
	writeJSON(w, 201, map[string]any{"id": rc.ID, "body": rc.Body, "path": rc.Path, "line": rc.Line})
}

func (s *Server) reply(w http.ResponseWriter, r *http.Request, p *pullRequest) {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	var in struct{ Body string }
	if !readJSON(w, r, &in) {
		return
	}
	s.replyTo(w, p, id, in.Body)
}

func (s *Server) replyTo(w http.ResponseWriter, p *pullRequest, id int64, body string) {
	in := struct{ Body string }{body}
	k := key(p.owner, p.repo, p.number)
	if s.tooLong(w, k, "PullRequestReviewComment", body) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	parent, ok := s.reviewCmt[id]
	if !ok || parent.PR != k {
		ghError(w, 404, "Not Found")
		return
	}
	s.nextID++
	rc := &ReviewComment{ID: s.nextID, PR: k, InReplyTo: id, Path: parent.Path, Line: parent.Line, Side: parent.Side, Body: in.Body, Author: s.Bot(), Created: s.cfg.NowFunc()}
	s.reviewCmt[rc.ID] = rc
	st := s.statsOf(k)
	st.Replies++
	if st.bodies["reply:"+in.Body]++; st.bodies["reply:"+in.Body] > 1 {
		st.Duplicates++
	}
	writeJSON(w, 201, map[string]any{"id": rc.ID, "body": rc.Body, "in_reply_to_id": id})
}

// Stats returns the write counts of one PR.
func (s *Server) Stats(owner, repo string, n int) PRStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.stats[key(owner, repo, n)]; ok {
		return *st
	}
	return PRStats{}
}

// AllStats returns the write counts of every PR written to.
func (s *Server) AllStats() map[string]PRStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]PRStats, len(s.stats))
	for k, v := range s.stats {
		out[k] = *v
	}
	return out
}

// Comments returns a PR's issue comments, oldest first.
func (s *Server) Comments(owner, repo string, n int) []IssueComment {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []IssueComment
	for _, c := range s.comments {
		if c.PR == key(owner, repo, n) {
			out = append(out, *c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// ReviewComments returns a PR's diff comments (the App's and humans').
func (s *Server) ReviewComments(owner, repo string, n int) []ReviewComment {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ReviewComment
	for _, c := range s.reviewCmt {
		if c.PR == key(owner, repo, n) {
			out = append(out, *c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Reviews returns a PR's reviews.
func (s *Server) Reviews(owner, repo string, n int) []Review {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Review
	for _, r := range s.reviews {
		if r.PR == key(owner, repo, n) {
			out = append(out, r)
		}
	}
	return out
}

// CheckRun is a check run with every state it went through.
type CheckRun struct {
	ID         int64  `json:"id"`
	Repo       string `json:"repo"`
	Name       string `json:"name"`
	HeadSHA    string `json:"head_sha"`
	Status     string `json:"status"`
	Conclusion string `json:"conclusion,omitempty"`
	Title      string `json:"title,omitempty"`
	Summary    string `json:"summary,omitempty"`
	Text       string `json:"text,omitempty"`
	DetailsURL string `json:"details_url,omitempty"`
	ExternalID string `json:"external_id,omitempty"`
	// History holds one entry per create or update, in order.
	History []CheckRunState `json:"history"`
}

// CheckRunState is a check run as one write left it.
type CheckRunState struct {
	At         time.Time `json:"at"`
	Status     string    `json:"status"`
	Conclusion string    `json:"conclusion,omitempty"`
	Summary    string    `json:"summary,omitempty"`
}

type checkRunIn struct {
	Name        *string `json:"name"`
	HeadSHA     *string `json:"head_sha"`
	Status      *string `json:"status"`
	Conclusion  *string `json:"conclusion"`
	DetailsURL  *string `json:"details_url"`
	ExternalID  *string `json:"external_id"`
	StartedAt   *string `json:"started_at"`
	CompletedAt *string `json:"completed_at"`
	Output      *struct {
		Title       *string          `json:"title"`
		Summary     *string          `json:"summary"`
		Text        *string          `json:"text"`
		Annotations []map[string]any `json:"annotations"`
	} `json:"output"`
}

var (
	checkStatuses    = map[string]bool{"queued": true, "in_progress": true, "completed": true}
	checkConclusions = map[string]bool{"action_required": true, "cancelled": true, "failure": true, "neutral": true,
		"success": true, "skipped": true, "stale": true, "timed_out": true}
)

// applyCheckRun validates in and applies it to c, answering 422 as GitHub
// does when it refuses a field.
func applyCheckRun(w http.ResponseWriter, c *CheckRun, in checkRunIn) bool {
	if in.Name != nil {
		if *in.Name == "" {
			validationFailed(w, "CheckRun", "name", "name can't be blank")
			return false
		}
		c.Name = *in.Name
	}
	if in.Status != nil {
		if !checkStatuses[*in.Status] {
			validationFailed(w, "CheckRun", "status", "status is not included in the list")
			return false
		}
		c.Status = *in.Status
	}
	if in.Conclusion != nil {
		if !checkConclusions[*in.Conclusion] {
			validationFailed(w, "CheckRun", "conclusion", "conclusion is not included in the list")
			return false
		}
		c.Conclusion = *in.Conclusion
		c.Status = "completed" // GitHub: a conclusion completes the run
	}
	if c.Status == "completed" && c.Conclusion == "" {
		validationFailed(w, "CheckRun", "conclusion", "conclusion can't be blank when status is completed")
		return false
	}
	if in.DetailsURL != nil {
		c.DetailsURL = *in.DetailsURL
	}
	if in.ExternalID != nil {
		c.ExternalID = *in.ExternalID
	}
	if o := in.Output; o != nil {
		if o.Title == nil || o.Summary == nil {
			validationFailed(w, "CheckRun", "output", "output requires title and summary")
			return false
		}
		if utf8.RuneCountInString(*o.Summary) > MaxCheckOutputChars {
			validationFailed(w, "CheckRun", "output.summary", fmt.Sprintf("Only %d characters are allowed; %d were supplied.", MaxCheckOutputChars, utf8.RuneCountInString(*o.Summary)))
			return false
		}
		if o.Text != nil && utf8.RuneCountInString(*o.Text) > MaxCheckOutputChars {
			validationFailed(w, "CheckRun", "output.text", fmt.Sprintf("Only %d characters are allowed; %d were supplied.", MaxCheckOutputChars, utf8.RuneCountInString(*o.Text)))
			return false
		}
		if len(o.Annotations) > MaxAnnotations {
			validationFailed(w, "CheckRun", "output.annotations", fmt.Sprintf("Only %d annotations are allowed per request.", MaxAnnotations))
			return false
		}
		c.Title, c.Summary = *o.Title, *o.Summary
		if o.Text != nil {
			c.Text = *o.Text
		}
	}
	return true
}

func (s *Server) knownCommit(owner, repo, sha string) bool {
	for _, q := range s.prs {
		if q.owner != owner || q.repo != repo {
			continue
		}
		if q.head == sha || q.base == sha {
			return true
		}
		for span := range q.pushes {
			from, to, _ := strings.Cut(span, "...")
			if from == sha || to == sha {
				return true
			}
		}
	}
	return false
}

func checkRunJSON(c *CheckRun) map[string]any {
	out := map[string]any{"id": c.ID, "name": c.Name, "head_sha": c.HeadSHA, "status": c.Status,
		"output": map[string]any{"title": c.Title, "summary": c.Summary, "text": c.Text}, "details_url": c.DetailsURL, "external_id": c.ExternalID}
	if c.Conclusion != "" {
		out["conclusion"] = c.Conclusion
	} else {
		out["conclusion"] = nil
	}
	return out
}

func (s *Server) createCheckRun(w http.ResponseWriter, r *http.Request, p *pullRequest) {
	var in checkRunIn
	if !readJSON(w, r, &in) {
		return
	}
	if in.Name == nil || *in.Name == "" {
		validationFailed(w, "CheckRun", "name", "name can't be blank")
		return
	}
	if in.HeadSHA == nil || *in.HeadSHA == "" {
		validationFailed(w, "CheckRun", "head_sha", "head_sha can't be blank")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.knownCommit(p.owner, p.repo, *in.HeadSHA) {
		validationFailed(w, "CheckRun", "head_sha", "No commit found for SHA: "+*in.HeadSHA)
		return
	}
	c := &CheckRun{Repo: p.owner + "/" + p.repo, HeadSHA: *in.HeadSHA, Status: "queued"}
	if !applyCheckRun(w, c, in) {
		return
	}
	s.nextID++
	c.ID = s.nextID
	c.History = append(c.History, CheckRunState{At: s.cfg.NowFunc(), Status: c.Status, Conclusion: c.Conclusion, Summary: c.Summary})
	s.checks[c.ID] = c
	writeJSON(w, 201, checkRunJSON(c))
}

func (s *Server) updateCheckRun(w http.ResponseWriter, r *http.Request, p *pullRequest) {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	var in checkRunIn
	if !readJSON(w, r, &in) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.checks[id]
	if !ok || c.Repo != p.owner+"/"+p.repo {
		ghError(w, 404, "Not Found")
		return
	}
	next := *c
	if !applyCheckRun(w, &next, in) {
		return
	}
	next.History = append(append([]CheckRunState(nil), c.History...), CheckRunState{At: s.cfg.NowFunc(), Status: next.Status, Conclusion: next.Conclusion, Summary: next.Summary})
	*c = next
	writeJSON(w, 200, checkRunJSON(c))
}

func (s *Server) listCheckRuns(w http.ResponseWriter, r *http.Request, p *pullRequest) {
	ref := r.PathValue("ref")
	name := r.URL.Query().Get("check_name")
	s.mu.Lock()
	var runs []any
	ids := make([]int64, 0, len(s.checks))
	for id := range s.checks {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] > ids[j] }) // newest first, as GitHub lists them
	for _, id := range ids {
		c := s.checks[id]
		if c.Repo == p.owner+"/"+p.repo && c.HeadSHA == ref && (name == "" || c.Name == name) {
			runs = append(runs, checkRunJSON(c))
		}
	}
	s.mu.Unlock()
	if runs == nil {
		runs = []any{}
	}
	writeJSON(w, 200, map[string]any{"total_count": len(runs), "check_runs": runs})
}

// CheckRuns returns the check runs of a repository's commit, oldest first.
func (s *Server) CheckRuns(owner, repo, sha string) []CheckRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []CheckRun
	for _, c := range s.checks {
		if c.Repo == owner+"/"+repo && c.HeadSHA == sha {
			cp := *c
			cp.History = append([]CheckRunState(nil), c.History...)
			out = append(out, cp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// paging reads GitHub's list parameters: per_page (default 30, at most
// 100) and page (default 1).
// pageOf sorts ids (oldest first), sets the Link header GitHub sends for
// the page the request asks for, and returns that page's ids.
func pageOf(w http.ResponseWriter, r *http.Request, ids []int64) []int64 {
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	perPage, page := paging(r)
	if link := linkHeader(r, perPage, page, max(1, (len(ids)+perPage-1)/perPage)); link != "" {
		w.Header().Set("Link", link)
	}
	lo := min((page-1)*perPage, len(ids))
	return ids[lo:min(lo+perPage, len(ids))]
}

func paging(r *http.Request) (perPage, page int) {
	perPage, page = 30, 1
	q := r.URL.Query()
	if v, err := strconv.Atoi(q.Get("per_page")); err == nil && v > 0 {
		perPage = min(v, 100)
	}
	if v, err := strconv.Atoi(q.Get("page")); err == nil && v > 0 {
		page = v
	}
	return perPage, page
}
