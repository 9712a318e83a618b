// Package fakegitlab is a faithful fake of the part of GitLab's REST API
// (v4) prq uses, for tests and the demo. It is a real HTTP server: it
// authenticates PRIVATE-TOKEN (a group or project access token is a bot
// user), addresses projects by id or URL-encoded full path, pages lists
// with GitLab's X-Page / X-Next-Page / X-Total headers, answers errors in
// GitLab's shape ({"message": ...}), validates diff note positions
// against the merge request's diff versions (new_line for an added line,
// old_line for a deleted one, both for a context line, line codes of a
// line_range) with GitLab's 400, keeps draft notes per author until
// bulk_publish, runs quick actions in the notes it is given (so a test
// sees one that escaped), keeps commit statuses' allowed transitions,
// and limits requests per token with 429, Retry-After and RateLimit-*
// headers. It serves the members API's access levels (SetMember). It
// records every write. It covers only those calls (any
// other route answers 404) and sends no webhooks: MergeRequestHook and
// NoteHook build their payloads for a test to send.
package fakegitlab

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prq-dev/prq/fake/corpus"
)

// Config configures the fake.
type Config struct {
	// RequestsPerPeriod caps each token's requests per Period: over it,
	// 429 with Retry-After. 0 or negative: no limit.
	RequestsPerPeriod int
	// Period defaults to one minute.
	Period time.Duration
	// NowFunc is the clock. Defaults to time.Now.
	NowFunc func() time.Time
}

// User is a GitLab user; a bot user stands behind each access token.
type User struct {
	ID       int64  `json:"id"`
	Username string `json:"username"`
	Name     string `json:"name"`
	Bot      bool   `json:"bot"`
}

// Server is the fake GitLab.
type Server struct {
	cfg Config
	mu  sync.Mutex
	// tokens map an access token to its user
	tokens   map[string]*User
	users    map[string]*User // by username
	projects map[string]*project
	nextID   int64
	window   map[string]*limitWindow
	failures map[string]int
	// Executed lists the quick actions GitLab ran from notes, by note.
	executed []string
	writes   []string
	limited  int
}

type limitWindow struct {
	start time.Time
	n     int
}

type project struct {
	id    int64
	path  string
	files map[string]map[string]string // ref (sha or branch) -> path -> content
	// branches map a branch to its head commit
	branches      map[string]string
	defaultBranch string
	mrs           map[int]*mergeRequest
	statuses      map[string][]*status // by sha
	// compareTimeout cuts comparisons short (SetCompareTimeout)
	compareTimeout bool
	// members are the users' access levels, inherited ones included
	// (SetMember), by user id
	members map[int64]int
}

// New returns an empty fake.
func New(cfg Config) *Server {
	if cfg.Period <= 0 {
		cfg.Period = time.Minute
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	return &Server{cfg: cfg, tokens: map[string]*User{}, users: map[string]*User{}, projects: map[string]*project{},
		window: map[string]*limitWindow{}, failures: map[string]int{}, nextID: 1000}
}

func (s *Server) id() int64 { s.nextID++; return s.nextID }

// AddToken makes token a bot user's access token (a group or project
// access token's bot is "group_<id>_bot_<hash>" on GitLab).
func (s *Server) AddToken(token, username string) *User {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.user(username)
	u.Bot = true
	s.tokens[token] = u
	return u
}

// user returns the user named username, creating it. Callers hold s.mu.
func (s *Server) user(username string) *User {
	if u, ok := s.users[username]; ok {
		return u
	}
	u := &User{ID: s.id(), Username: username, Name: username}
	s.users[username] = u
	return u
}

// AddProject creates a project at its full path ("acme/api") with the
// target branch's files at baseSHA.
func (s *Server) AddProject(path, branch, baseSHA string, files map[string]string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := &project{id: s.id(), path: path, files: map[string]map[string]string{}, branches: map[string]string{branch: baseSHA}, defaultBranch: branch,
		mrs: map[int]*mergeRequest{}, statuses: map[string][]*status{}, members: map[int64]int{}}
	p.files[baseSHA] = files
	s.projects[path] = p
	return p.id
}

// SetFile sets a file's content at ref.
func (s *Server) SetFile(projectPath, ref, path, content string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.projects[projectPath]
	if p.files[ref] == nil {
		p.files[ref] = map[string]string{}
	}
	p.files[ref][path] = content
}

// SetMember gives username an access level in the project (10 Guest, 20
// Reporter, 30 Developer, 40 Maintainer, 50 Owner; 0 removes it), as
// GitLab's members/all reports it, membership through a group included.
func (s *Server) SetMember(projectPath, username string, level int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.user(username)
	if level == 0 {
		delete(s.projects[projectPath].members, u.ID)
		return
	}
	s.projects[projectPath].members[u.ID] = level
}

// UserID returns username's user id (creating the user).
func (s *Server) UserID(username string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.user(username).ID
}

// member is GET /projects/:id/members/all/:user_id.
func (s *Server) member(q *request, id string) {
	uid, err := strconv.ParseInt(id, 10, 64)
	level, ok := q.p.members[uid]
	if err != nil || !ok {
		apiError(q.w, http.StatusNotFound, "404 Not found")
		return
	}
	for _, u := range s.users {
		if u.ID == uid {
			writeJSON(q.w, http.StatusOK, map[string]any{"id": u.ID, "username": u.Username, "name": u.Name, "state": "active", "access_level": level})
			return
		}
	}
	apiError(q.w, http.StatusNotFound, "404 Not found")
}

// FailNext makes the next request whose path contains substr answer
// status.
func (s *Server) FailNext(substr string, status int) {
	s.mu.Lock()
	s.failures[substr] = status
	s.mu.Unlock()
}

// Executed returns the quick actions GitLab ran from notes.
func (s *Server) Executed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.executed...)
}

// Writes returns every write, as "METHOD path".
func (s *Server) Writes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.writes...)
}

// Limited returns how many requests were refused with 429.
func (s *Server) Limited() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limited
}

// apiError writes GitLab's error shape.
func apiError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"message": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// request is one API call, routed.
type request struct {
	w    http.ResponseWriter
	r    *http.Request
	user *User
	p    *project
	rest []string // path segments after /projects/:id, unescaped
	body map[string]any
}

// ServeHTTP serves /api/v4.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path, ok := strings.CutPrefix(r.URL.EscapedPath(), "/api/v4/")
	if !ok {
		apiError(w, http.StatusNotFound, "404 Not Found")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub, status := range s.failures {
		if strings.Contains(r.URL.Path, sub) {
			delete(s.failures, sub)
			apiError(w, status, fmt.Sprintf("%d injected", status))
			return
		}
	}
	u, ok := s.tokens[r.Header.Get("PRIVATE-TOKEN")]
	if !ok {
		if bearer, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); found {
			u, ok = s.tokens[bearer]
		}
	}
	if !ok {
		apiError(w, http.StatusUnauthorized, "401 Unauthorized")
		return
	}
	if !s.allow(w, r.Header.Get("PRIVATE-TOKEN")+r.Header.Get("Authorization")) {
		return
	}
	q := &request{w: w, r: r, user: u}
	if r.Method != http.MethodGet {
		s.writes = append(s.writes, r.Method+" "+r.URL.Path)
		if r.Body != nil && strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			if err := json.NewDecoder(r.Body).Decode(&q.body); err != nil && !errors.Is(err, io.EOF) {
				apiError(w, http.StatusBadRequest, "400 Bad request - malformed JSON")
				return
			}
		}
	}
	segs := strings.Split(path, "/")
	switch {
	case path == "user" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, u)
	case len(segs) >= 2 && segs[0] == "projects":
		pid, _ := url.PathUnescape(segs[1])
		q.p = s.project(pid)
		if q.p == nil {
			apiError(w, http.StatusNotFound, "404 Project Not Found")
			return
		}
		for _, sg := range segs[2:] {
			v, err := url.PathUnescape(sg)
			if err != nil {
				apiError(w, http.StatusBadRequest, "400 Bad request - malformed path")
				return
			}
			q.rest = append(q.rest, v)
		}
		s.route(q)
	default:
		apiError(w, http.StatusNotFound, "404 Not Found")
	}
}

// project finds a project by numeric id or full path.
func (s *Server) project(pid string) *project {
	if p, ok := s.projects[pid]; ok {
		return p
	}
	if id, err := strconv.ParseInt(pid, 10, 64); err == nil {
		for _, p := range s.projects {
			if p.id == id {
				return p
			}
		}
	}
	return nil
}

// allow counts a token's request in its window and answers 429 over the
// limit; every answer carries GitLab's RateLimit-* headers.
func (s *Server) allow(w http.ResponseWriter, token string) bool {
	if s.cfg.RequestsPerPeriod <= 0 {
		return true
	}
	now := s.cfg.NowFunc()
	lw := s.window[token]
	if lw == nil || now.Sub(lw.start) >= s.cfg.Period {
		lw = &limitWindow{start: now}
		s.window[token] = lw
	}
	lw.n++
	reset := lw.start.Add(s.cfg.Period)
	h := w.Header()
	h.Set("RateLimit-Limit", strconv.Itoa(s.cfg.RequestsPerPeriod))
	h.Set("RateLimit-Observed", strconv.Itoa(lw.n))
	h.Set("RateLimit-Remaining", strconv.Itoa(max(0, s.cfg.RequestsPerPeriod-lw.n)))
	h.Set("RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
	if lw.n <= s.cfg.RequestsPerPeriod {
		return true
	}
	s.limited++
	h.Set("Retry-After", strconv.Itoa(int(max(1, reset.Sub(now).Seconds()+0.999))))
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusTooManyRequests)
	fmt.Fprint(w, "Retry later\n")
	return false
}

// page writes one page of items with GitLab's paging headers.
func page[T any](q *request, items []T) {
	per, _ := strconv.Atoi(q.r.URL.Query().Get("per_page"))
	if per <= 0 {
		per = 20
	}
	per = min(per, 100)
	n, _ := strconv.Atoi(q.r.URL.Query().Get("page"))
	n = max(n, 1)
	total := len(items)
	pages := max(1, (total+per-1)/per)
	h := q.w.Header()
	h.Set("X-Page", strconv.Itoa(n))
	h.Set("X-Per-Page", strconv.Itoa(per))
	h.Set("X-Total", strconv.Itoa(total))
	h.Set("X-Total-Pages", strconv.Itoa(pages))
	h.Set("X-Prev-Page", "")
	if n > 1 {
		h.Set("X-Prev-Page", strconv.Itoa(n-1))
	}
	h.Set("X-Next-Page", "")
	if n < pages {
		h.Set("X-Next-Page", strconv.Itoa(n+1))
	}
	from, to := min((n-1)*per, total), min(n*per, total)
	out := items[from:to]
	if out == nil {
		out = []T{}
	}
	writeJSON(q.w, http.StatusOK, out)
}

// route serves /projects/:id/...
func (s *Server) route(q *request) {
	r := q.rest
	m := q.r.Method
	switch {
	case len(r) >= 3 && r[0] == "repository" && r[1] == "files" && m == http.MethodGet:
		s.getFile(q, strings.Join(r[2:], "/"))
	case len(r) == 2 && r[0] == "repository" && r[1] == "compare" && m == http.MethodGet:
		s.compare(q)
	case len(r) == 3 && r[0] == "members" && r[1] == "all" && m == http.MethodGet:
		s.member(q, r[2])
	case len(r) == 2 && r[0] == "statuses" && m == http.MethodPost:
		s.setStatus(q, r[1])
	case len(r) == 4 && r[0] == "repository" && r[1] == "commits" && r[3] == "statuses" && m == http.MethodGet:
		s.listStatuses(q, r[2])
	case len(r) >= 2 && r[0] == "merge_requests":
		iid, err := strconv.Atoi(r[1])
		mr := q.p.mrs[iid]
		if err != nil || mr == nil {
			apiError(q.w, http.StatusNotFound, "404 Not found")
			return
		}
		s.routeMR(q, mr, r[2:])
	default:
		apiError(q.w, http.StatusNotFound, "404 Not Found")
	}
}

func (s *Server) getFile(q *request, path string) {
	ref := q.r.URL.Query().Get("ref")
	if ref == "" {
		apiError(q.w, http.StatusBadRequest, "400 Bad request - ref is missing")
		return
	}
	if ref == "HEAD" { // the default branch
		ref = q.p.defaultBranch
	}
	if sha, ok := q.p.branches[ref]; ok {
		ref = sha
	}
	content, ok := q.p.files[ref][path]
	if !ok {
		apiError(q.w, http.StatusNotFound, "404 File Not Found")
		return
	}
	writeJSON(q.w, http.StatusOK, map[string]any{"file_name": path[strings.LastIndex(path, "/")+1:], "file_path": path, "size": len(content),
		"encoding": "base64", "content": b64(content), "ref": q.r.URL.Query().Get("ref"), "blob_id": blobID(content), "commit_id": ref, "last_commit_id": ref})
}

// diffJSON is a file's diff as GitLab's diffs and versions have it.
func diffJSON(f corpus.File, collapsedOver int) map[string]any {
	d := map[string]any{"old_path": f.Filename, "new_path": f.Filename, "a_mode": "100644", "b_mode": "100644",
		"new_file": f.Status == "added", "deleted_file": f.Status == "removed", "renamed_file": false,
		"generated_file": false, "too_large": false, "collapsed": false, "diff": ""}
	switch {
	case f.Patch == nil:
		d["too_large"] = true
	case collapsedOver > 0 && len(*f.Patch) > collapsedOver:
		d["collapsed"] = true
	default:
		d["diff"] = strings.TrimSuffix(*f.Patch, "\n") + "\n" // GitLab ends each diff with a newline
	}
	return d
}
