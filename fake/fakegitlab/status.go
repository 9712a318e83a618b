package fakegitlab

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/prq-dev/prq/fake/corpus"
)

type status struct {
	ID          int64  `json:"id"`
	SHA         string `json:"sha"`
	Ref         string `json:"ref"`
	Status      string `json:"status"`
	Name        string `json:"name"`
	TargetURL   string `json:"target_url"`
	Description string `json:"description"`
	CreatedAt   string `json:"created_at"`
	Author      *User  `json:"author"`
	// History is every state the status went through, for tests.
	History []string `json:"-"`
}

// events are GitLab's commit status transitions: the event that moves a
// status to each state, and the states it may leave from.
var events = map[string]struct {
	event string
	from  []string
}{
	"pending":  {"enqueue", []string{"created"}},
	"running":  {"run", []string{"created", "pending"}},
	"success":  {"success", []string{"created", "pending", "running"}},
	"failed":   {"drop", []string{"created", "pending", "running"}},
	"canceled": {"cancel", []string{"created", "pending", "running"}},
}

// setStatus is POST /projects/:id/statuses/:sha. A status of the same
// name still pending or running moves on (an impossible transition is
// GitLab's 400); a finished one is followed by a new one.
func (s *Server) setStatus(q *request, sha string) {
	state, _ := q.body["state"].(string)
	name, _ := q.body["name"].(string)
	if name == "" {
		name = "default"
	}
	ev, ok := events[state]
	if !ok {
		writeJSON(q.w, http.StatusBadRequest, map[string]string{"error": "state does not have a valid value"})
		return
	}
	if desc, _ := q.body["description"].(string); len(desc) > 255 {
		apiError(q.w, http.StatusBadRequest, "400 Bad request - description is too long (maximum is 255 characters)")
		return
	}
	var cur *status
	for _, st := range q.p.statuses[sha] {
		if st.Name == name && (st.Status == "pending" || st.Status == "running" || st.Status == "created") {
			cur = st
		}
	}
	if cur == nil {
		cur = &status{ID: s.id(), SHA: sha, Name: name, Status: "created", Author: q.user, CreatedAt: s.cfg.NowFunc().UTC().Format(time.RFC3339)}
		q.p.statuses[sha] = append(q.p.statuses[sha], cur)
	}
	allowed := false
	for _, f := range ev.from {
		allowed = allowed || f == cur.Status
	}
	if !allowed {
		apiError(q.w, http.StatusBadRequest, fmt.Sprintf("Cannot transition status via :%s from :%s (Reason(s): Status cannot transition via \"%s\")", ev.event, cur.Status, ev.event))
		return
	}
	cur.Status = state
	cur.History = append(cur.History, state)
	cur.Ref, _ = q.body["ref"].(string)
	cur.TargetURL, _ = q.body["target_url"].(string)
	cur.Description, _ = q.body["description"].(string)
	writeJSON(q.w, http.StatusCreated, cur)
}

func (s *Server) listStatuses(q *request, sha string) {
	name := q.r.URL.Query().Get("name")
	var out []*status
	for _, st := range q.p.statuses[sha] {
		if name == "" || st.Name == name {
			out = append(out, st)
		}
	}
	page(q, out)
}

// SetCompareTimeout makes the project's comparisons of more than one
// file time out, as a large one does on GitLab: the first file only,
// with compare_timeout.
func (s *Server) SetCompareTimeout(projectPath string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.projects[projectPath].compareTimeout = on
}

// Statuses returns the states each commit status named name on sha went
// through, oldest status first.
func (s *Server) Statuses(projectPath, sha, name string) [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][]string
	for _, st := range s.projects[projectPath].statuses[sha] {
		if st.Name == name {
			out = append(out, append([]string(nil), st.History...))
		}
	}
	return out
}

// compare is GET /projects/:id/repository/compare: the files changed
// between two heads of one of the project's merge requests.
func (s *Server) compare(q *request) {
	from, to := q.r.URL.Query().Get("from"), q.r.URL.Query().Get("to")
	for _, mr := range q.p.mrs {
		var a, b *diffVersion
		for _, v := range mr.versions {
			if v.head == from {
				a = v
			}
			if v.head == to {
				b = v
			}
		}
		if a == nil || b == nil {
			continue
		}
		var diffs []map[string]any
		for _, f := range b.files {
			if !sameFile(a.files, f) {
				diffs = append(diffs, diffJSON(f, 0))
			}
		}
		timeout := q.p.compareTimeout && len(diffs) > 1
		if timeout { // GitLab stops collecting diffs when a comparison takes too long
			diffs = diffs[:1]
		}
		writeJSON(q.w, http.StatusOK, map[string]any{"commits": []any{}, "diffs": diffs, "compare_timeout": timeout, "compare_same_ref": from == to})
		return
	}
	apiError(q.w, http.StatusNotFound, "404 Ref Not Found")
}

func sameFile(files []corpus.File, f corpus.File) bool {
	for _, g := range files {
		if g.Filename == f.Filename {
			a, _ := json.Marshal(g)
			b, _ := json.Marshal(f)
			return string(a) == string(b)
		}
	}
	return false
}
