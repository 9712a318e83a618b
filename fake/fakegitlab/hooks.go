package fakegitlab

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
)

// Webhook event names (X-Gitlab-Event).
const (
	EventMergeRequest = "Merge Request Hook"
	EventNote         = "Note Hook"
)

// uuid returns a random UUID (v4 form).
func uuid() string {
	b := make([]byte, 16)
	rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Delivery is a webhook request as GitLab sends it: the secret token in
// X-Gitlab-Token, a new X-Gitlab-Event-UUID, and an Idempotency-Key that
// a retry of the same delivery repeats (pass the previous one's; "" for
// a new one).
func Delivery(url, token, event, idempotencyKey string, body []byte) (*http.Request, error) {
	r, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if idempotencyKey == "" {
		idempotencyKey = uuid()
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("User-Agent", "GitLab/18.6.0")
	r.Header.Set("X-Gitlab-Event", event)
	r.Header.Set("X-Gitlab-Token", token)
	r.Header.Set("X-Gitlab-Event-UUID", uuid())
	r.Header.Set("X-Gitlab-Webhook-UUID", "c3f2a4a8-0b52-4d2f-8d07-4e0ad5a4d3c1")
	r.Header.Set("X-Gitlab-Instance", "https://gitlab.example")
	r.Header.Set("Idempotency-Key", idempotencyKey)
	return r, nil
}

func (s *Server) projectJSON(p *project) map[string]any {
	return map[string]any{"id": p.id, "name": p.path[lastSlash(p.path)+1:], "path_with_namespace": p.path,
		"web_url": "https://gitlab.example/" + p.path, "default_branch": "main"}
}

func lastSlash(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

func userHook(u *User) map[string]any {
	return map[string]any{"id": u.ID, "name": u.Name, "username": u.Username}
}

// MergeRequestHook builds a Merge Request Hook payload for the merge
// request as it stands, with action (open, reopen, update, close, merge)
// and, for an update that pushed commits, oldrev (the previous head).
func (s *Server) MergeRequestHook(projectPath string, iid int, action, oldrev string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mr := s.mr(projectPath, iid)
	if mr == nil {
		return nil, fmt.Errorf("fakegitlab: no merge request %s!%d", projectPath, iid)
	}
	attrs := s.mrHookAttrs(mr)
	attrs["action"] = action
	if oldrev != "" {
		attrs["oldrev"] = oldrev
	}
	return json.Marshal(map[string]any{"object_kind": "merge_request", "event_type": "merge_request", "user": userHook(mr.author),
		"project": s.projectJSON(mr.p), "object_attributes": attrs, "labels": []any{}, "changes": map[string]any{},
		"repository": map[string]any{"name": mr.p.path, "homepage": "https://gitlab.example/" + mr.p.path}})
}

func (s *Server) mrHookAttrs(mr *mergeRequest) map[string]any {
	v := mr.head()
	return map[string]any{"id": mr.iid + 100000, "iid": mr.iid, "target_branch": mr.targetBranch, "source_branch": mr.sourceBranch,
		"title": mr.title, "description": mr.description, "state": mr.state, "draft": mr.draft, "work_in_progress": mr.draft,
		"author_id": mr.author.ID, "last_commit": map[string]any{"id": v.head}, "target_project_id": mr.p.id,
		"url":        fmt.Sprintf("https://gitlab.example/%s/-/merge_requests/%d", mr.p.path, mr.iid),
		"updated_at": s.cfg.NowFunc().UTC().Format("2006-01-02 15:04:05 UTC")}
}

// NoteHook builds a Note Hook payload for a note of a merge request.
func (s *Server) NoteHook(projectPath string, iid int, noteID int64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mr := s.mr(projectPath, iid)
	if mr == nil {
		return nil, fmt.Errorf("fakegitlab: no merge request %s!%d", projectPath, iid)
	}
	var n *note
	for _, x := range mr.notes {
		if x.ID == noteID {
			n = x
		}
	}
	if n == nil {
		return nil, fmt.Errorf("fakegitlab: no note %d on %s!%d", noteID, projectPath, iid)
	}
	attrs := map[string]any{"id": n.ID, "note": n.Body, "noteable_type": "MergeRequest", "author_id": n.Author.ID,
		"project_id": mr.p.id, "discussion_id": n.discussion, "type": n.Type, "system": n.System,
		"url":        fmt.Sprintf("https://gitlab.example/%s/-/merge_requests/%d#note_%d", mr.p.path, mr.iid, n.ID),
		"created_at": n.CreatedAt, "updated_at": s.cfg.NowFunc().UTC().Format("2006-01-02 15:04:05 UTC")}
	if n.Position != nil {
		attrs["position"] = n.Position
	}
	return json.Marshal(map[string]any{"object_kind": "note", "event_type": "note", "user": userHook(n.Author), "project_id": mr.p.id,
		"project": s.projectJSON(mr.p), "object_attributes": attrs, "merge_request": s.mrHookAttrs(mr)})
}
