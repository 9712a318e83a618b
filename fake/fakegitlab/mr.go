package fakegitlab

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prq-dev/prq/diff"
	"github.com/prq-dev/prq/fake/corpus"
)

type mergeRequest struct {
	p                          *project
	iid                        int
	title, description         string
	state                      string // opened, closed, merged
	draft                      bool
	author                     *User
	sourceBranch, targetBranch string
	labels                     []string
	versions                   []*diffVersion // oldest first
	notes                      []*note
	drafts                     []*draftNote
	awards                     map[int64][]award
	// CollapseOver collapses diffs longer than it in the diffs list.
	collapseOver int
}

type diffVersion struct {
	id                int64
	base, start, head string
	files             []corpus.File
	created           time.Time
}

type note struct {
	ID           int64          `json:"id"`
	Type         any            `json:"type"` // null, "DiffNote" or "DiscussionNote"
	Body         string         `json:"body"`
	Author       *User          `json:"author"`
	System       bool           `json:"system"`
	Resolvable   bool           `json:"resolvable"`
	Resolved     bool           `json:"resolved"`
	NoteableType string         `json:"noteable_type"`
	NoteableIID  int            `json:"noteable_iid"`
	Position     map[string]any `json:"position,omitempty"`
	CreatedAt    string         `json:"created_at"`
	discussion   string
	individual   bool
}

type draftNote struct {
	ID       int64          `json:"id"`
	AuthorID int64          `json:"author_id"`
	Note     string         `json:"note"`
	Position map[string]any `json:"position,omitempty"`
	// Discussion is the discussion a reply draft goes to.
	Discussion string `json:"discussion_id"`
}

type award struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
	User *User  `json:"user"`
}

// AddMR opens merge request iid of a project from the corpus PR's files:
// its first diff version has base and head as given, start = base.
func (s *Server) AddMR(projectPath string, iid int, author string, pr corpus.PR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.projects[projectPath]
	if p == nil {
		return fmt.Errorf("fakegitlab: no project %s", projectPath)
	}
	mr := &mergeRequest{p: p, iid: iid, title: pr.Title, description: pr.Body, state: "opened", author: s.user(author),
		sourceBranch: fmt.Sprintf("feature-%d", iid), targetBranch: p.defaultBranch, awards: map[int64][]award{}}
	mr.versions = append(mr.versions, &diffVersion{id: s.id(), base: pr.BaseSHA, start: pr.BaseSHA, head: pr.HeadSHA, files: pr.Files, created: s.cfg.NowFunc()})
	p.mrs[iid] = mr
	return nil
}

// Push adds a diff version: the merge request's head moves to newHead
// and the files in changed replace or join its diffs.
func (s *Server) Push(projectPath string, iid int, newHead string, changed []corpus.File) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	mr := s.mr(projectPath, iid)
	if mr == nil {
		return fmt.Errorf("fakegitlab: no merge request %s!%d", projectPath, iid)
	}
	last := mr.versions[len(mr.versions)-1]
	files := append([]corpus.File(nil), last.files...)
	for _, f := range changed {
		replaced := false
		for i := range files {
			if files[i].Filename == f.Filename {
				files[i], replaced = f, true
			}
		}
		if !replaced {
			files = append(files, f)
		}
	}
	mr.versions = append(mr.versions, &diffVersion{id: s.id(), base: last.base, start: last.start, head: newHead, files: files, created: s.cfg.NowFunc()})
	return nil
}

// SetState sets a merge request's state: opened, closed or merged.
func (s *Server) SetState(projectPath string, iid int, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if mr := s.mr(projectPath, iid); mr != nil {
		mr.state = state
	}
}

// AddNote adds a note by author (a person commenting) and returns its id.
func (s *Server) AddNote(projectPath string, iid int, author, body string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	mr := s.mr(projectPath, iid)
	return s.addNote(mr, s.user(author), body, nil, "").ID
}

// AddReply adds author's reply in the discussion of note to and returns
// its id (0 when there is no such note).
func (s *Server) AddReply(projectPath string, iid int, author string, to int64, body string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	mr := s.mr(projectPath, iid)
	root := mr.note(strconv.FormatInt(to, 10))
	if root == nil {
		return 0
	}
	return s.addNote(mr, s.user(author), body, nil, root.discussion).ID
}

// AddDraft adds a general draft note of author's (one a round that died
// before its publish left behind).
func (s *Server) AddDraft(projectPath string, iid int, author, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mr := s.mr(projectPath, iid)
	mr.drafts = append(mr.drafts, &draftNote{ID: s.id(), AuthorID: s.user(author).ID, Note: body})
}

func (s *Server) mr(projectPath string, iid int) *mergeRequest {
	if p := s.projects[projectPath]; p != nil {
		return p.mrs[iid]
	}
	return nil
}

// Note is a note as a test reads it back.
type Note struct {
	ID         int64
	Author     string
	Body       string
	DiffNote   bool
	Discussion string
	// NewLine and OldLine are a diff note's position (0: none).
	NewLine, OldLine int
	Path             string
	HeadSHA          string
	// Created is when the note was created.
	Created time.Time
}

// Notes returns a merge request's notes, oldest first.
func (s *Server) Notes(projectPath string, iid int) []Note {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Note
	mr := s.mr(projectPath, iid)
	if mr == nil {
		return nil
	}
	for _, n := range mr.notes {
		o := Note{ID: n.ID, Author: n.Author.Username, Body: n.Body, DiffNote: n.Type == "DiffNote", Discussion: n.discussion}
		o.Created, _ = time.Parse(time.RFC3339Nano, n.CreatedAt)
		if n.Position != nil {
			o.NewLine, o.OldLine = intOf(n.Position["new_line"]), intOf(n.Position["old_line"])
			o.Path, _ = n.Position["new_path"].(string)
			o.HeadSHA, _ = n.Position["head_sha"].(string)
		}
		out = append(out, o)
	}
	return out
}

// Award gives note noteID an award emoji (thumbsup, thumbsdown, …) from
// username, as a person clicking it does; the same award twice is one.
func (s *Server) Award(projectPath string, iid int, noteID int64, username, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mr := s.mr(projectPath, iid)
	if mr == nil {
		return
	}
	u := s.user(username)
	for _, a := range mr.awards[noteID] {
		if a.Name == name && a.User == u {
			return
		}
	}
	mr.awards[noteID] = append(mr.awards[noteID], award{ID: s.id(), Name: name, User: u})
}

// Awards returns the award emoji names on a note.
func (s *Server) Awards(projectPath string, iid int, noteID int64) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	if mr := s.mr(projectPath, iid); mr != nil {
		for _, a := range mr.awards[noteID] {
			out = append(out, a.Name)
		}
	}
	return out
}

func intOf(v any) int {
	switch x := v.(type) {
	case float64:
		return int(x)
	case int:
		return x
	case int64:
		return int(x)
	case string:
		n, _ := strconv.Atoi(x)
		return n
	}
	return 0
}

func (mr *mergeRequest) head() *diffVersion { return mr.versions[len(mr.versions)-1] }

func (s *Server) mrJSON(mr *mergeRequest) map[string]any {
	v := mr.head()
	labels := mr.labels
	if labels == nil {
		labels = []string{}
	}
	return map[string]any{"id": mr.iid + 100000, "iid": mr.iid, "project_id": mr.p.id, "title": mr.title, "description": mr.description,
		"state": mr.state, "draft": mr.draft, "work_in_progress": mr.draft, "author": mr.author, "source_branch": mr.sourceBranch,
		"target_branch": mr.targetBranch, "labels": labels, "sha": v.head,
		"diff_refs": map[string]string{"base_sha": v.base, "start_sha": v.start, "head_sha": v.head},
		"web_url":   fmt.Sprintf("https://gitlab.example/%s/-/merge_requests/%d", mr.p.path, mr.iid)}
}

// routeMR serves /projects/:id/merge_requests/:iid/...
func (s *Server) routeMR(q *request, mr *mergeRequest, r []string) {
	m := q.r.Method
	switch {
	case len(r) == 0 && m == http.MethodGet:
		writeJSON(q.w, http.StatusOK, s.mrJSON(mr))
	case len(r) == 1 && r[0] == "diffs" && m == http.MethodGet:
		var out []map[string]any
		for _, f := range mr.head().files {
			out = append(out, diffJSON(f, mr.collapseOver))
		}
		page(q, out)
	case len(r) == 1 && r[0] == "versions" && m == http.MethodGet:
		var out []map[string]any
		for i := len(mr.versions) - 1; i >= 0; i-- { // newest first
			out = append(out, versionJSON(mr, mr.versions[i], false))
		}
		page(q, out)
	case len(r) == 2 && r[0] == "versions" && m == http.MethodGet:
		for _, v := range mr.versions {
			if strconv.FormatInt(v.id, 10) == r[1] {
				writeJSON(q.w, http.StatusOK, versionJSON(mr, v, true))
				return
			}
		}
		apiError(q.w, http.StatusNotFound, "404 Not found")
	case len(r) >= 1 && r[0] == "notes":
		s.routeNotes(q, mr, r[1:])
	case len(r) >= 1 && r[0] == "discussions":
		s.routeDiscussions(q, mr, r[1:])
	case len(r) >= 1 && r[0] == "draft_notes":
		s.routeDrafts(q, mr, r[1:])
	default:
		apiError(q.w, http.StatusNotFound, "404 Not Found")
	}
}

func versionJSON(mr *mergeRequest, v *diffVersion, diffs bool) map[string]any {
	out := map[string]any{"id": v.id, "head_commit_sha": v.head, "base_commit_sha": v.base, "start_commit_sha": v.start,
		"created_at": v.created.UTC().Format(time.RFC3339), "merge_request_id": mr.iid + 100000, "state": "collected", "real_size": strconv.Itoa(len(v.files))}
	if diffs {
		var ds []map[string]any
		for _, f := range v.files {
			ds = append(ds, diffJSON(f, 0))
		}
		out["diffs"] = ds
	}
	return out
}

func (s *Server) routeNotes(q *request, mr *mergeRequest, r []string) {
	m := q.r.Method
	switch {
	case len(r) == 0 && m == http.MethodGet:
		notes := append([]*note(nil), mr.notes...)
		if q.r.URL.Query().Get("sort") != "asc" { // GitLab's default: newest first
			for i, j := 0, len(notes)-1; i < j; i, j = i+1, j-1 {
				notes[i], notes[j] = notes[j], notes[i]
			}
		}
		page(q, notes)
	case len(r) == 0 && m == http.MethodPost:
		body, _ := q.body["body"].(string)
		if strings.TrimSpace(body) == "" {
			apiError(q.w, http.StatusBadRequest, "400 Bad request - body is missing")
			return
		}
		writeJSON(q.w, http.StatusCreated, s.addNote(mr, q.user, body, nil, ""))
	case len(r) == 1 && m == http.MethodPut:
		n := mr.note(r[0])
		body, _ := q.body["body"].(string)
		switch {
		case n == nil:
			apiError(q.w, http.StatusNotFound, "404 Note Not Found")
		case n.Author != q.user:
			apiError(q.w, http.StatusForbidden, "403 Forbidden")
		case strings.TrimSpace(body) == "":
			apiError(q.w, http.StatusBadRequest, "400 Bad request - body is missing")
		default:
			n.Body = s.quickActions(mr, q.user, body)
			writeJSON(q.w, http.StatusOK, n)
		}
	case len(r) == 2 && r[1] == "award_emoji":
		n := mr.note(r[0])
		if n == nil {
			apiError(q.w, http.StatusNotFound, "404 Note Not Found")
			return
		}
		if m == http.MethodGet {
			page(q, mr.awards[n.ID])
			return
		}
		name, _ := q.body["name"].(string)
		for _, a := range mr.awards[n.ID] {
			if a.Name == name && a.User == q.user {
				apiError(q.w, http.StatusNotFound, "404 Award Emoji Name has already been taken Not Found")
				return
			}
		}
		if name == "" || strings.ContainsAny(name, " :") {
			apiError(q.w, http.StatusBadRequest, "400 Bad request - name is invalid")
			return
		}
		a := award{ID: s.id(), Name: name, User: q.user}
		mr.awards[n.ID] = append(mr.awards[n.ID], a)
		writeJSON(q.w, http.StatusCreated, a)
	default:
		apiError(q.w, http.StatusNotFound, "404 Not Found")
	}
}

func (mr *mergeRequest) note(id string) *note {
	for _, n := range mr.notes {
		if strconv.FormatInt(n.ID, 10) == id {
			return n
		}
	}
	return nil
}

// addNote adds a note (in discussion, or starting one), after GitLab runs
// its quick actions. Callers hold s.mu.
func (s *Server) addNote(mr *mergeRequest, u *User, body string, pos map[string]any, discussion string) *note {
	n := &note{ID: s.id(), Body: s.quickActions(mr, u, body), Author: u, NoteableType: "MergeRequest", NoteableIID: mr.iid,
		CreatedAt: s.cfg.NowFunc().UTC().Format(time.RFC3339Nano), discussion: discussion}
	switch {
	case pos != nil:
		n.Type, n.Position, n.Resolvable = "DiffNote", pos, true
	case discussion != "":
		n.Type, n.Resolvable = "DiscussionNote", true
	}
	if n.discussion == "" {
		n.discussion, n.individual = newDiscussionID(), pos == nil
	}
	mr.notes = append(mr.notes, n)
	return n
}

func newDiscussionID() string {
	b := make([]byte, 20)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// quickActionRe is GitLab's quick-action line: /command at the start of
// a line (fenced blocks aside).
var quickActionRe = regexp.MustCompile(`^/(merge|close|reopen|approve|unapprove|assign|unassign|label|unlabel|milestone|title|draft|ready|lock|unlock|rebase|submit_review|award|react|spend|estimate|due|copy_metadata|relate|target_branch|todo|done|subscribe|unsubscribe|reviewer|request_review|cc|shrug|tableflip)\b.*$`)

// quickActions runs and strips the quick actions of a note, as GitLab
// does with the author's rights, and records them.
func (s *Server) quickActions(mr *mergeRequest, u *User, body string) string {
	var kept []string
	fence := ""
	for _, l := range strings.Split(body, "\n") {
		t := strings.TrimSpace(l)
		switch {
		case fence == "" && (strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~")):
			fence = t[:3]
		case fence != "" && strings.HasPrefix(t, fence):
			fence = ""
		case fence == "" && quickActionRe.MatchString(l):
			s.executed = append(s.executed, fmt.Sprintf("%s!%d by %s: %s", mr.p.path, mr.iid, u.Username, l))
			switch quickActionRe.FindStringSubmatch(l)[1] {
			case "merge":
				mr.state = "merged"
			case "close":
				mr.state = "closed"
			}
			continue
		}
		kept = append(kept, l)
	}
	return strings.Join(kept, "\n")
}

func (s *Server) routeDiscussions(q *request, mr *mergeRequest, r []string) {
	m := q.r.Method
	switch {
	case len(r) == 0 && m == http.MethodGet:
		var out []map[string]any
		seen := map[string]int{}
		for _, n := range mr.notes {
			if i, ok := seen[n.discussion]; ok {
				out[i]["notes"] = append(out[i]["notes"].([]*note), n)
				continue
			}
			seen[n.discussion] = len(out)
			out = append(out, map[string]any{"id": n.discussion, "individual_note": n.individual, "notes": []*note{n}})
		}
		page(q, out)
	case len(r) == 0 && m == http.MethodPost:
		body, _ := q.body["body"].(string)
		pos, _ := q.body["position"].(map[string]any)
		if pos != nil {
			if msg := validPosition(mr, pos); msg != "" {
				apiError(q.w, http.StatusBadRequest, msg)
				return
			}
		}
		n := s.addNote(mr, q.user, body, pos, "")
		n.individual = false
		writeJSON(q.w, http.StatusCreated, map[string]any{"id": n.discussion, "individual_note": false, "notes": []*note{n}})
	case len(r) == 2 && r[1] == "notes" && m == http.MethodPost:
		root := mr.discussion(r[0])
		body, _ := q.body["body"].(string)
		switch {
		case root == nil:
			apiError(q.w, http.StatusNotFound, "404 Discussion Not Found")
		case strings.TrimSpace(body) == "":
			apiError(q.w, http.StatusBadRequest, "400 Bad request - body is missing")
		default:
			root.individual = false
			writeJSON(q.w, http.StatusCreated, s.addNote(mr, q.user, body, nil, r[0]))
		}
	case len(r) == 1 && m == http.MethodPut:
		root := mr.discussion(r[0])
		if root == nil || !root.Resolvable {
			apiError(q.w, http.StatusNotFound, "404 Discussion Not Found")
			return
		}
		resolved := q.body["resolved"] == true || q.r.URL.Query().Get("resolved") == "true"
		for _, n := range mr.notes {
			if n.discussion == r[0] {
				n.Resolved = resolved
			}
		}
		writeJSON(q.w, http.StatusOK, map[string]any{"id": r[0], "individual_note": false, "notes": []*note{root}})
	default:
		apiError(q.w, http.StatusNotFound, "404 Not Found")
	}
}

func (mr *mergeRequest) discussion(id string) *note {
	for _, n := range mr.notes {
		if n.discussion == id {
			return n
		}
	}
	return nil
}

func (s *Server) routeDrafts(q *request, mr *mergeRequest, r []string) {
	m := q.r.Method
	mine := func() []*draftNote {
		var out []*draftNote
		for _, d := range mr.drafts {
			if d.AuthorID == q.user.ID {
				out = append(out, d)
			}
		}
		return out
	}
	switch {
	case len(r) == 0 && m == http.MethodGet:
		page(q, mine())
	case len(r) == 0 && m == http.MethodPost:
		body, _ := q.body["note"].(string)
		pos, _ := q.body["position"].(map[string]any)
		if strings.TrimSpace(body) == "" {
			apiError(q.w, http.StatusBadRequest, "400 Bad request - note is missing")
			return
		}
		if pos != nil {
			if msg := validPosition(mr, pos); msg != "" {
				apiError(q.w, http.StatusBadRequest, msg)
				return
			}
		}
		d := &draftNote{ID: s.id(), AuthorID: q.user.ID, Note: body, Position: pos}
		d.Discussion, _ = q.body["in_reply_to_discussion_id"].(string)
		mr.drafts = append(mr.drafts, d)
		writeJSON(q.w, http.StatusCreated, d)
	case len(r) == 1 && r[0] == "bulk_publish" && m == http.MethodPost:
		var rest []*draftNote
		for _, d := range mr.drafts {
			if d.AuthorID != q.user.ID {
				rest = append(rest, d)
				continue
			}
			n := s.addNote(mr, q.user, d.Note, d.Position, d.Discussion)
			if d.Position != nil {
				n.individual = false
			}
		}
		mr.drafts = rest
		q.w.WriteHeader(http.StatusNoContent)
	case len(r) == 1 && m == http.MethodDelete:
		for i, d := range mr.drafts {
			if strconv.FormatInt(d.ID, 10) == r[0] && d.AuthorID == q.user.ID {
				mr.drafts = append(mr.drafts[:i], mr.drafts[i+1:]...)
				q.w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		apiError(q.w, http.StatusNotFound, "404 Not found")
	default:
		apiError(q.w, http.StatusNotFound, "404 Not Found")
	}
}

// badPosition is GitLab's answer to a diff note it cannot place.
const badPosition = `400 Bad request - Note {:line_code=>["can't be blank", "must be a valid line code"], :position=>["is incomplete"]}`

// validPosition checks a text position as GitLab does: the shas are a
// diff version's, the path one of its diffs, and the line exists there
// on the sides given (new_line alone: added; old_line alone: deleted;
// both: context). It returns GitLab's message, or "".
func validPosition(mr *mergeRequest, pos map[string]any) string {
	if pos["position_type"] != "text" {
		return "400 Bad request - position_type is invalid"
	}
	var v *diffVersion
	for _, x := range mr.versions {
		if x.base == pos["base_sha"] && x.start == pos["start_sha"] && x.head == pos["head_sha"] {
			v = x
		}
	}
	if v == nil {
		return badPosition
	}
	path, _ := pos["new_path"].(string)
	var f *corpus.File
	for i := range v.files {
		if v.files[i].Filename == path && v.files[i].Patch != nil {
			f = &v.files[i]
		}
	}
	if f == nil || pos["old_path"] != path {
		return badPosition
	}
	d, err := diff.Parse(*f.Patch)
	if err != nil {
		return badPosition
	}
	end, ok := lineAt(d, intOf(pos["old_line"]), intOf(pos["new_line"]))
	if !ok {
		return badPosition
	}
	if lr, ok := pos["line_range"].(map[string]any); ok {
		start, _ := lr["start"].(map[string]any)
		stop, _ := lr["end"].(map[string]any)
		sl, ok1 := lineAt(d, intOf(start["old_line"]), intOf(start["new_line"]))
		el, ok2 := lineAt(d, intOf(stop["old_line"]), intOf(stop["new_line"]))
		if !ok1 || !ok2 || start["line_code"] != lineCode(path, sl) || stop["line_code"] != lineCode(path, el) || el != end {
			return badPosition
		}
	}
	return ""
}

// lineAt finds the diff line with exactly these numbers (0: absent on
// that side).
func lineAt(d *diff.Patch, old, new int) (diff.Line, bool) {
	if old == 0 && new == 0 {
		return diff.Line{}, false
	}
	for _, h := range d.Hunks {
		for _, l := range h.Lines {
			if l.Old == old && l.New == new {
				return l, true
			}
		}
	}
	return diff.Line{}, false
}

// lineCode is GitLab's line code: sha1 of the path, old and new line.
func lineCode(path string, l diff.Line) string {
	sum := sha1.Sum([]byte(path))
	return fmt.Sprintf("%s_%d_%d", hex.EncodeToString(sum[:]), l.Old, l.New)
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// blobID is git's blob sha of content.
func blobID(content string) string {
	sum := sha1.Sum([]byte(fmt.Sprintf("blob %d\x00%s", len(content), content)))
	return hex.EncodeToString(sum[:])
}
