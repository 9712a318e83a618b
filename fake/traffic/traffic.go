// Package traffic makes GitHub webhook deliveries the way GitHub sends
// them (signed, with event and delivery headers, payloads shaped like
// GitHub's) for the demo, the benchmark, the chaos runs and tests. It
// sends only to the URL it is given. It keeps no GitHub state (the PRs
// its events name live in fakegithub) and does not judge the replies.
package traffic

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prq-dev/prq/webhook"
)

// PR is what a pull_request payload needs.
type PR struct {
	Installation int64
	Owner, Repo  string
	Number       int
	Title        string
	Head, Base   string
	Before       string // synchronize: the previous head
	Author       string
	Bot          bool
	Draft        bool
}

func repoJSON(owner, repo string) map[string]any {
	return map[string]any{"id": 1000 + len(owner)*31 + len(repo), "name": repo, "full_name": owner + "/" + repo, "private": false,
		"owner": map[string]any{"login": owner, "id": 5000 + len(owner), "type": "Organization"}}
}

func user(login string, bot bool) map[string]any {
	t := "User"
	if bot {
		t = "Bot"
	}
	return map[string]any{"login": login, "id": 9000 + len(login), "type": t}
}

// PullRequestEvent is a pull_request delivery's payload.
func PullRequestEvent(action string, p PR) []byte {
	author := p.Author
	if author == "" {
		author = "octocat"
	}
	body := map[string]any{
		"action": action, "number": p.Number,
		"pull_request": map[string]any{
			"number": p.Number, "state": "open", "draft": p.Draft, "title": p.Title, "user": user(author, p.Bot),
			// as on GitHub, each event stamps the pull request, so no two
			// deliveries' bodies are the same (prq refuses a body replayed)
			"updated_at": time.Now().UTC().Format(time.RFC3339Nano),
			"head":       map[string]any{"sha": p.Head, "ref": "feature", "repo": repoJSON(p.Owner, p.Repo)},
			"base":       map[string]any{"sha": p.Base, "ref": "main", "repo": repoJSON(p.Owner, p.Repo)},
		},
		"repository":   repoJSON(p.Owner, p.Repo),
		"installation": map[string]any{"id": p.Installation},
		"sender":       user(author, p.Bot),
	}
	if action == "closed" {
		body["pull_request"].(map[string]any)["state"] = "closed"
	}
	if action == "synchronize" {
		body["before"], body["after"] = p.Before, p.Head
	}
	b, _ := json.Marshal(body)
	return b
}

// Comment is a comment that may talk to the bot.
type Comment struct {
	Installation int64
	Owner, Repo  string
	Number       int
	ID           int64
	Author       string
	Body         string
	// Path, Line and DiffHunk make it a diff (review) comment.
	Path      string
	Line      int
	DiffHunk  string
	InReplyTo int64
	// Association is GitHub's author_association of the commenter.
	// Defaults to MEMBER; PRAuthor is the pull request's author.
	Association string
	PRAuthor    string
}

func (c Comment) association() string {
	if c.Association == "" {
		return "MEMBER"
	}
	return c.Association
}

func (c Comment) prAuthor() map[string]any {
	if c.PRAuthor == "" {
		return user("author", false)
	}
	return user(c.PRAuthor, false)
}

// IssueCommentEvent is an issue_comment "created" on a pull request.
func IssueCommentEvent(c Comment) []byte {
	b, _ := json.Marshal(map[string]any{
		"action": "created",
		"issue": map[string]any{"number": c.Number, "title": "PR", "state": "open", "user": c.prAuthor(),
			"pull_request": map[string]any{"url": fmt.Sprintf("https://api.github.com/repos/%s/%s/pulls/%d", c.Owner, c.Repo, c.Number)}},
		"comment":      map[string]any{"id": c.ID, "body": c.Body, "user": user(c.Author, false), "author_association": c.association()},
		"repository":   repoJSON(c.Owner, c.Repo),
		"installation": map[string]any{"id": c.Installation},
		"sender":       user(c.Author, false),
	})
	return b
}

// ReviewCommentEvent is a pull_request_review_comment "created".
func ReviewCommentEvent(c Comment) []byte {
	comment := map[string]any{"id": c.ID, "body": c.Body, "user": user(c.Author, false), "path": c.Path, "line": c.Line, "side": "RIGHT",
		"diff_hunk": c.DiffHunk, "author_association": c.association()}
	if c.InReplyTo != 0 {
		comment["in_reply_to_id"] = c.InReplyTo
	}
	b, _ := json.Marshal(map[string]any{
		"action": "created", "comment": comment,
		"pull_request": map[string]any{"number": c.Number, "state": "open", "user": c.prAuthor()},
		"repository":   repoJSON(c.Owner, c.Repo),
		"installation": map[string]any{"id": c.Installation},
		"sender":       user(c.Author, false),
	})
	return b
}

// NewDelivery returns a fresh delivery GUID.
func NewDelivery() string {
	b := make([]byte, 16)
	rand.Read(b)
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Sender posts deliveries to a webhook URL.
type Sender struct {
	URL    string
	Secret []byte
	Client *http.Client
}

// Send posts one signed delivery and returns the status code.
func (s *Sender) Send(ctx context.Context, event, delivery string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/prq-traffic")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", delivery)
	req.Header.Set("X-Hub-Signature-256", webhook.Sign(s.Secret, body))
	c := s.Client
	if c == nil {
		c = &http.Client{Timeout: 15 * time.Second}
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}
