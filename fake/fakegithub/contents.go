package fakegithub

import (
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// repository is a repository's files, by ref (a branch name or a commit
// sha), served by the contents API.
type repository struct {
	inst  int64
	files map[string]map[string]string // ref -> path -> content
}

// DefaultBranch is the branch the fake's repositories and pull requests
// are based on: the contents API reads it when no ref is given.
const DefaultBranch = "main"

// SetFile puts a file into a repository of installation inst at ref (a
// branch name or a commit sha; "" is DefaultBranch), as a commit there
// would. content "" deletes it. A repository need not have pull
// requests (an organisation's .github repository). A pull request's
// base commit that has no files of its own shows DefaultBranch's: it is
// a commit on that branch.
func (s *Server) SetFile(inst int64, owner, repo, ref, file, content string) {
	if ref == "" {
		ref = DefaultBranch
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := owner + "/" + repo
	rp := s.repos[k]
	if rp == nil {
		rp = &repository{inst: inst, files: map[string]map[string]string{}}
		s.repos[k] = rp
	}
	if rp.files[ref] == nil {
		rp.files[ref] = map[string]string{}
	}
	if content == "" {
		delete(rp.files[ref], file)
		return
	}
	rp.files[ref][file] = content
}

// ContentReads counts the contents API's requests for a repository.
func (s *Server) ContentReads(owner, repo string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contentReads[owner+"/"+repo]
}

// blobSHA is git's object id of a blob with the content.
func blobSHA(content string) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(content))
	h.Write([]byte(content))
	return hex.EncodeToString(h.Sum(nil))
}

// wrap64 is base64 as the contents API sends it: lines of 60 characters.
func wrap64(content string) string {
	enc := base64.StdEncoding.EncodeToString([]byte(content))
	var b strings.Builder
	for len(enc) > 60 {
		b.WriteString(enc[:60] + "\n")
		enc = enc[60:]
	}
	b.WriteString(enc + "\n")
	return b.String()
}

// maxInline is the largest file the contents API sends inline; a larger
// one comes with encoding "none" and empty content.
const maxInline = 1 << 20

// getContents is GET /repos/{owner}/{repo}/contents/{path}: a file
// (base64, its blob sha and size) or a directory's entries at ref (the
// default branch without one), 404 when absent.
func (s *Server) getContents(w http.ResponseWriter, r *http.Request, p *pullRequest) {
	file := strings.Trim(r.PathValue("path"), "/")
	ref := r.URL.Query().Get("ref")
	s.mu.Lock()
	s.contentReads[p.owner+"/"+p.repo]++
	files := s.filesAt(p.owner, p.repo, ref)
	s.mu.Unlock()
	base := "https://api.github.com/repos/" + p.owner + "/" + p.repo
	entry := func(name, typ, content string) map[string]any {
		sha, size := blobSHA(content), len(content)
		if typ == "dir" {
			sha, size = blobSHA("tree "+name), 0
		}
		u := base + "/contents/" + name + "?ref=" + ref
		return map[string]any{"type": typ, "name": path.Base(name), "path": name, "sha": sha, "size": size, "url": u,
			"git_url": base + "/git/blobs/" + sha, "html_url": "https://github.com/" + p.owner + "/" + p.repo + "/blob/" + ref + "/" + name,
			"download_url": "https://raw.githubusercontent.com/" + p.owner + "/" + p.repo + "/" + ref + "/" + name,
			"_links":       map[string]any{"self": u, "git": base + "/git/blobs/" + sha, "html": "https://github.com/" + p.owner + "/" + p.repo + "/blob/" + ref + "/" + name}}
	}
	if content, ok := files[file]; ok {
		e := entry(file, "file", content)
		e["encoding"], e["content"] = "base64", wrap64(content)
		if len(content) > maxInline {
			e["encoding"], e["content"] = "none", ""
		}
		writeJSON(w, http.StatusOK, e)
		return
	}
	var dir []map[string]any
	seen := map[string]bool{}
	for name, content := range files {
		rest, ok := strings.CutPrefix(name, file+"/")
		if file == "" {
			rest, ok = name, true
		}
		if !ok {
			continue
		}
		child, _, deeper := strings.Cut(rest, "/")
		full := strings.TrimPrefix(file+"/"+child, "/")
		if seen[full] {
			continue
		}
		seen[full] = true
		if deeper {
			dir = append(dir, entry(full, "dir", ""))
		} else {
			dir = append(dir, entry(full, "file", content))
		}
	}
	if len(dir) == 0 {
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	sort.Slice(dir, func(i, j int) bool { return dir[i]["path"].(string) < dir[j]["path"].(string) })
	writeJSON(w, http.StatusOK, dir)
}

// filesAt returns a repository's files at ref. Callers hold s.mu.
func (s *Server) filesAt(owner, repo, ref string) map[string]string {
	rp := s.repos[owner+"/"+repo]
	if rp == nil {
		return nil
	}
	if ref == "" {
		ref = DefaultBranch
	}
	if f, ok := rp.files[ref]; ok {
		return f
	}
	for _, q := range s.prs {
		if q.owner == owner && q.repo == repo && q.base == ref {
			return rp.files[DefaultBranch] // a base commit is on the default branch
		}
	}
	return nil
}

// File returns a file's content at ref, as the contents API serves it
// (ok false: no such file there).
func (s *Server) File(owner, repo, ref, file string) (content string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	content, ok = s.filesAt(owner, repo, ref)[file]
	return content, ok
}

// SetLabels sets a pull request's labels.
func (s *Server) SetLabels(owner, repo string, n int, labels ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.prs[key(owner, repo, n)]; p != nil {
		p.labels = append([]string(nil), labels...)
	}
}

// SetDraft marks a pull request a draft or ready for review.
func (s *Server) SetDraft(owner, repo string, n int, draft bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.prs[key(owner, repo, n)]; p != nil {
		p.draft = draft
	}
}

// SetBaseRef changes the name of a pull request's base branch.
func (s *Server) SetBaseRef(owner, repo string, n int, ref string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.prs[key(owner, repo, n)]; p != nil {
		p.baseRef = ref
	}
}

func labelsJSON(owner, repo string, labels []string) []any {
	out := []any{}
	for i, l := range labels {
		out = append(out, map[string]any{"id": 5000 + i, "node_id": fmt.Sprintf("LA_%d", 5000+i), "name": l, "color": "ededed", "default": false,
			"description": nil, "url": "https://api.github.com/repos/" + owner + "/" + repo + "/labels/" + l})
	}
	return out
}

// reactionContents are the reactions GitHub accepts.
var reactionContents = map[string]bool{"+1": true, "-1": true, "laugh": true, "confused": true, "heart": true, "hooray": true, "rocket": true, "eyes": true}

// reaction is one person's (or the App's) reaction on a comment.
type reaction struct {
	ID      int64
	User    string
	Content string
	Created time.Time
}

// Reactions returns the contents of the App's reactions on a comment,
// in the order they were made (each content once, as on GitHub).
func (s *Server) Reactions(commentID int64) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.reactions[commentID] {
		if r.User == s.Bot() {
			out = append(out, r.Content)
		}
	}
	return out
}

// AddReaction records user's reaction on a comment (a test's person, or
// the App's bot account by its login), as GitHub would: once per user
// and content. It reports false for a content GitHub does not know.
func (s *Server) AddReaction(commentID int64, user, content string) bool {
	if !reactionContents[content] {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addReaction(commentID, user, content)
	return true
}

// RemoveReaction takes user's reaction off a comment, as a person who
// clicks it again does.
func (s *Server) RemoveReaction(commentID int64, user, content string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs := s.reactions[commentID]
	for i, r := range rs {
		if r.User == user && r.Content == content {
			s.reactions[commentID] = append(rs[:i:i], rs[i+1:]...)
			return
		}
	}
}

// addReaction adds a reaction unless the user made it already; it
// returns the reaction and whether it is new. s.mu is held.
func (s *Server) addReaction(commentID int64, user, content string) (reaction, bool) {
	for _, r := range s.reactions[commentID] {
		if r.User == user && r.Content == content {
			return r, false
		}
	}
	s.nextID++
	r := reaction{ID: s.nextID, User: user, Content: content, Created: s.cfg.NowFunc().UTC()}
	s.reactions[commentID] = append(s.reactions[commentID], r)
	return r, true
}

// reactionJSON is a reaction as GitHub's REST API sends it. s.mu is held.
func (s *Server) reactionJSON(r reaction) map[string]any {
	return map[string]any{"id": r.ID, "node_id": fmt.Sprintf("REA_%d", r.ID), "user": s.userJSON(r.User), "content": r.Content, "created_at": r.Created.Format(time.RFC3339)}
}

// listReactions is GET .../pulls/comments/{id}/reactions: the comment's
// reactions, oldest first, paginated, those of one content when the
// content query parameter names it; 404 for a comment that is not there.
func (s *Server) listReactions(w http.ResponseWriter, r *http.Request, p *pullRequest) {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	want := r.URL.Query().Get("content")
	s.mu.Lock()
	c := s.reviewCmt[id]
	if c == nil || !strings.HasPrefix(c.PR, p.owner+"/"+p.repo+"#") {
		s.mu.Unlock()
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	var idx []int64
	for i, rc := range s.reactions[id] {
		if want == "" || rc.Content == want {
			idx = append(idx, int64(i))
		}
	}
	out := []any{}
	for _, i := range pageOf(w, r, idx) {
		out = append(out, s.reactionJSON(s.reactions[id][i]))
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// react is POST .../issues/comments/{id}/reactions and
// .../pulls/comments/{id}/reactions: 201 with the reaction, 200 when the
// App reacted so already, 404 for a comment that is not there, 422 for
// a content GitHub does not know.
func (s *Server) react(review bool) handler {
	return func(w http.ResponseWriter, r *http.Request, p *pullRequest) {
		var in struct {
			Content string `json:"content"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			ghError(w, http.StatusBadRequest, "Problems parsing JSON")
			return
		}
		id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
		s.mu.Lock()
		defer s.mu.Unlock()
		var on string
		if review {
			if c := s.reviewCmt[id]; c != nil {
				on = c.PR
			}
		} else if c := s.comments[id]; c != nil {
			on = c.PR
		}
		if on == "" || !strings.HasPrefix(on, p.owner+"/"+p.repo+"#") {
			ghError(w, http.StatusNotFound, "Not Found")
			return
		}
		if !reactionContents[in.Content] {
			validationFailed(w, "Reaction", "content", "invalid")
			return
		}
		rc, fresh := s.addReaction(id, s.Bot(), in.Content)
		status := http.StatusOK
		if fresh {
			status = http.StatusCreated
		}
		writeJSON(w, status, s.reactionJSON(rc))
	}
}
