package webhook

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"regexp"
	"strings"

	"github.com/prq-dev/prq/jobs"
)

// GitLabTenant is a GitLab tenant as the receiver knows it.
type GitLabTenant struct {
	// ID is the prq tenant id (jobs.GitLabTenant of the group's or
	// project's GitLab id).
	ID int64
	// Path is the group's or project's full path: deliveries of the
	// projects under it are its (the longest matching path wins).
	Path string
	// Token is the secret token of the tenant's webhook; "" uses
	// GitLabConfig.Token.
	Token string
}

// GitLabConfig configures the GitLab receiver.
type GitLabConfig struct {
	// Token is the secret token of webhooks whose tenant sets none.
	Token   string
	Tenants []GitLabTenant
	// Bots are usernames whose notes are never answered, beside GitLab's
	// group and project access token bots (group_<id>_bot_<hash>,
	// project_<id>_bot_<hash>): prq's own notes among them.
	Bots []string
}

// GitLabHandler receives GitLab webhooks (POST /webhook/gitlab): Merge
// Request Hook and Note Hook, authenticated by X-Gitlab-Token compared in
// constant time, deduplicated by Idempotency-Key (a retried delivery
// keeps it) or X-Gitlab-Event-UUID. It shares the GitHub receiver's
// queue, plans, chat limits and body budget, so both forges' work keeps
// one order and one set of limits.
type GitLabHandler struct {
	h   *Handler
	cfg GitLabConfig
}

// NewGitLab returns the GitLab receiver beside h.
func NewGitLab(cfg GitLabConfig, h *Handler) (*GitLabHandler, error) {
	for i, t := range cfg.Tenants {
		switch {
		case jobs.ForgeOf(t.ID) != jobs.ForgeGitLab:
			return nil, fmt.Errorf("webhook: gitlab tenants[%d]: id %d is not a GitLab tenant id", i, t.ID)
		case strings.Trim(t.Path, "/") == "":
			return nil, fmt.Errorf("webhook: gitlab tenants[%d]: path is required", i)
		case t.Token == "" && cfg.Token == "":
			return nil, fmt.Errorf("webhook: gitlab tenants[%d] (%s): no webhook token (set its own or the shared one)", i, t.Path)
		}
		cfg.Tenants[i].Path = strings.Trim(t.Path, "/")
	}
	return &GitLabHandler{h: h, cfg: cfg}, nil
}

// tenant returns the tenant of a project path: the longest configured
// path the project lies under.
func (g *GitLabHandler) tenant(project string) (GitLabTenant, bool) {
	var best GitLabTenant
	found := false
	for _, t := range g.cfg.Tenants {
		if (project == t.Path || strings.HasPrefix(project, t.Path+"/")) && len(t.Path) > len(best.Path) {
			best, found = t, true
		}
	}
	return best, found
}

// tokenOK compares the delivery's token with want in constant time.
func tokenOK(got, want string) bool {
	if want == "" {
		return false
	}
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// authentic reports whether token is the tenant's webhook token (the
// shared one when it has none). A delivery of no tenant's project (an
// event without a project, a project no tenant covers) is authentic
// with any configured token: it is answered 200, so GitLab does not
// count it as a failure of the hook.
func (g *GitLabHandler) authentic(token string, t GitLabTenant, known bool) bool {
	if known {
		want := g.cfg.Token
		if t.Token != "" {
			want = t.Token
		}
		return tokenOK(token, want)
	}
	ok := tokenOK(token, g.cfg.Token)
	for _, t := range g.cfg.Tenants {
		ok = tokenOK(token, t.Token) || ok // every one compared: the time does not tell which
	}
	return ok
}

// glUser is a user in a GitLab hook.
type glUser struct {
	ID       int64  `json:"id"`
	Username string `json:"username"`
}

// glMR is a merge request in a GitLab hook.
type glMR struct {
	IID        int    `json:"iid"`
	State      string `json:"state"`
	Draft      bool   `json:"draft"`
	Action     string `json:"action"`
	OldRev     string `json:"oldrev"`
	AuthorID   int64  `json:"author_id"`
	LastCommit struct {
		ID string `json:"id"`
	} `json:"last_commit"`
	URL string `json:"url"`
}

// glHook is what prq reads of a Merge Request Hook or Note Hook.
type glHook struct {
	ObjectKind string `json:"object_kind"`
	User       glUser `json:"user"`
	Project    struct {
		Path string `json:"path_with_namespace"`
	} `json:"project"`
	ObjectAttributes json.RawMessage `json:"object_attributes"`
	MergeRequest     *glMR           `json:"merge_request"`
	Changes          struct {
		Draft *struct {
			Previous bool `json:"previous"`
			Current  bool `json:"current"`
		} `json:"draft"`
	} `json:"changes"`
}

// ServeHTTP handles POST /webhook/gitlab.
func (g *GitLabHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := g.h
	defer func() {
		if p := recover(); p != nil {
			h.log.ErrorContext(r.Context(), "gitlab webhook handler panicked", "panic", fmt.Sprint(p))
			http.Error(w, `{"result":"internal error"}`, http.StatusInternalServerError)
		}
	}()
	event := glEventLabel(r.Header.Get("X-Gitlab-Event"))
	body, release, ok := h.intake(w, r, event)
	defer release()
	if !ok {
		return
	}
	var hook glHook
	jsonErr := json.Unmarshal(body, &hook)
	t, known := g.tenant(hook.Project.Path)
	if !g.authentic(r.Header.Get("X-Gitlab-Token"), t, known) {
		h.reply(w, r, event, outcome{http.StatusUnauthorized, "bad token"}, errors.New("X-Gitlab-Token does not match"), false)
		return
	}
	delivery := r.Header.Get("Idempotency-Key")
	if delivery == "" {
		delivery = r.Header.Get("X-Gitlab-Event-UUID")
	}
	switch {
	case jsonErr != nil:
		h.reply(w, r, event, outcome{http.StatusBadRequest, "malformed"}, fmt.Errorf("payload: %v", jsonErr), true)
		return
	case delivery == "" || len(delivery) > 100 || strings.ContainsAny(delivery, "{}|:\x00 "):
		h.reply(w, r, event, outcome{http.StatusBadRequest, "malformed"}, errors.New("missing or malformed Idempotency-Key and X-Gitlab-Event-UUID"), true)
		return
	case !known:
		h.reply(w, r, event, outcome{http.StatusOK, "unknown tenant"}, nil, true)
		return
	}
	o, err := g.accept(r.Context(), r.Header.Get("X-Gitlab-Event"), "gl-"+delivery, body, t, &hook)
	h.reply(w, r, event, o, err, true)
}

// glEventLabel names a GitLab event in counts and logs: a fixed set,
// whatever a sender puts in the header.
func glEventLabel(event string) string {
	switch event {
	case "Merge Request Hook":
		return "gitlab_merge_request"
	case "Note Hook":
		return "gitlab_note"
	}
	return "gitlab_other"
}

// accept dispatches a delivery once per body, as the GitHub receiver's
// accept does.
func (g *GitLabHandler) accept(ctx context.Context, event, delivery string, body []byte, t GitLabTenant, hook *glHook) (outcome, error) {
	rp := g.h.cfg.Replays
	if rp == nil {
		return g.dispatch(ctx, event, delivery, t, hook)
	}
	mac := sha256.New()
	mac.Write([]byte("gitlab\x00" + event + "\x00"))
	mac.Write(body)
	digest := hex.EncodeToString(mac.Sum(nil))
	held, err := rp.ClaimDelivery(ctx, digest, delivery, g.h.cfg.ReplayWindow)
	if err != nil {
		return unavailable(err)
	}
	if held != delivery {
		return duplicate, nil
	}
	o, err := g.dispatch(ctx, event, delivery, t, hook)
	if o.status >= 300 {
		if rerr := rp.ReleaseDelivery(context.WithoutCancel(ctx), digest, delivery); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return o, err
}

func (g *GitLabHandler) dispatch(ctx context.Context, event, delivery string, t GitLabTenant, hook *glHook) (outcome, error) {
	switch {
	case event == "Merge Request Hook" && hook.ObjectKind == "merge_request":
		var mr glMR
		if err := json.Unmarshal(hook.ObjectAttributes, &mr); err != nil {
			return malformed("merge_request: %v", err)
		}
		return g.mergeRequest(ctx, delivery, t, hook, mr)
	case event == "Note Hook" && hook.ObjectKind == "note":
		return g.note(ctx, delivery, t, hook)
	}
	return ignored, nil
}

// botRe matches GitLab's group and project access token bot users.
// (group_<id>_bot_<hash> now, group_<id>_bot<n> before GitLab 16).
var botRe = regexp.MustCompile(`^(group|project)_\d+_bot(_?[0-9a-z]+)?$`)

func (g *GitLabHandler) isBot(username string) bool {
	if botRe.MatchString(username) {
		return true
	}
	for _, b := range g.cfg.Bots {
		if strings.EqualFold(b, username) {
			return true
		}
	}
	return false
}

func glRef(t GitLabTenant, project string, iid int) (jobs.PR, error) {
	i := strings.LastIndex(project, "/")
	if i <= 0 {
		return jobs.PR{}, fmt.Errorf("project path %q has no namespace", project)
	}
	pr := jobs.PR{Installation: t.ID, Owner: project[:i], Repo: project[i+1:], Number: iid}
	return pr, pr.Validate()
}

// glAction maps a Merge Request Hook's action to the pull request
// action the planner knows: update is a push only with oldrev (a title
// edit is not one); marking ready or draft are their own.
func glAction(hook *glHook, mr glMR) string {
	switch mr.Action {
	case "open":
		return "opened"
	case "reopen":
		return "reopened"
	case "close", "merge":
		return "closed"
	case "update":
		switch d := hook.Changes.Draft; {
		case mr.OldRev != "":
			return "synchronize"
		case d != nil && d.Previous && !d.Current:
			return "ready_for_review"
		case d != nil && !d.Previous && d.Current:
			return "converted_to_draft"
		}
	}
	return ""
}

func (g *GitLabHandler) mergeRequest(ctx context.Context, delivery string, t GitLabTenant, hook *glHook, mr glMR) (outcome, error) {
	action := glAction(hook, mr)
	if action == "" {
		return ignored, nil
	}
	ref, err := glRef(t, hook.Project.Path, mr.IID)
	if err != nil {
		return malformed("merge_request: %v", err)
	}
	h := g.h
	planDrafts := false
	if h.cfg.Repos != nil && (mr.Draft || action == "converted_to_draft") {
		rs, known, err := h.cfg.Repos.RepoSettings(ctx, ref)
		if err != nil {
			return unavailable(err)
		}
		planDrafts = rs.Drafts || !known
	}
	switch {
	case action == "converted_to_draft" && planDrafts:
		return ignored, nil
	case action == "converted_to_draft", action == "closed":
		if err := h.queue.Cancel(ctx, ref); err != nil {
			return unavailable(err)
		}
		return cancelled, nil
	case mr.Draft && !planDrafts, mr.State != "opened":
		return ignored, nil
	case h.cfg.SkipBotPRs && mr.AuthorID == hook.User.ID && g.isBot(hook.User.Username):
		return ignored, nil
	case mr.LastCommit.ID == "":
		return malformed("merge_request without last_commit")
	}
	return h.enqueuePlan(ctx, jobs.Plan{PR: ref, HeadSHA: mr.LastCommit.ID, Before: mr.OldRev, Action: action, Delivery: delivery})
}

// glNote is a note in a Note Hook.
type glNote struct {
	ID           int64  `json:"id"`
	Note         string `json:"note"`
	NoteableType string `json:"noteable_type"`
	System       bool   `json:"system"`
	URL          string `json:"url"`
	DiscussionID string `json:"discussion_id"`
	Position     *struct {
		NewPath string `json:"new_path"`
		NewLine int    `json:"new_line"`
	} `json:"position"`
}

// note answers a note on a merge request that mentions the bot: a
// command, else chat. Every GitLab note is in a discussion, so answers
// go in it (Review). The bot's own notes are never answered.
func (g *GitLabHandler) note(ctx context.Context, delivery string, t GitLabTenant, hook *glHook) (outcome, error) {
	var n glNote
	if err := json.Unmarshal(hook.ObjectAttributes, &n); err != nil {
		return malformed("note: %v", err)
	}
	h := g.h
	// prq's own notes carry its markers, whatever account wrote them
	ours := g.isBot(hook.User.Username) || strings.Contains(n.Note, "<!-- prq:")
	if n.NoteableType != "MergeRequest" || hook.MergeRequest == nil || n.System || ours {
		return ignored, nil
	}
	mentioned := h.mentions(n.Note)
	if !mentioned {
		// a reply in a discussion the bot answered in talks to it too,
		// as on GitHub
		if n.DiscussionID == "" {
			return ignored, nil
		}
		answered, err := h.plans.AppThread(ctx, GitLabThread(n.DiscussionID))
		if err != nil {
			return unavailable(err)
		}
		if !answered {
			return ignored, nil
		}
	}
	if n.ID <= 0 {
		return malformed("note without id")
	}
	ref, err := glRef(t, hook.Project.Path, hook.MergeRequest.IID)
	if err != nil {
		return malformed("note: %v", err)
	}
	name, args, isCommand := "", "", false
	if mentioned {
		name, args, isCommand = h.commandOf(n.Note)
	}
	// GitLab's hook names no role: who may comment on the merge request
	// (a member of a private project, anyone signed in on a public one)
	// may talk to the bot, within the chat limits; learn and forget, which
	// change what every review reads, take a Maintainer, which the worker
	// asks GitLab's members API about (AuthorID)
	c := jobs.Command{PR: ref, CommentID: n.ID, Review: true, Author: hook.User.Username, AuthorID: hook.User.ID, Name: name, Args: args, Link: n.URL, Delivery: delivery}
	if n.Position != nil {
		c.Path = n.Position.NewPath
	}
	if isCommand {
		return h.runCommand(ctx, c, true)
	}
	ch := jobs.Chat{PR: ref, CommentID: n.ID, Review: true, Author: hook.User.Username, Body: n.Note, Delivery: delivery}
	if n.DiscussionID != "" {
		ch.Thread = GitLabThread(n.DiscussionID) // the discussion the answer marks as the bot's
	}
	if n.Position != nil {
		ch.Path, ch.Line = n.Position.NewPath, n.Position.NewLine
	}
	return h.chat(ctx, ch)
}

// GitLabThread is the thread id prq records for a GitLab discussion (its
// id is 40 hex digits, a thread's is a number): FNV-1a of the id, in
// 2^62..2^63-1, above GitHub's comment ids.
func GitLabThread(discussion string) int64 {
	f := fnv.New64a()
	f.Write([]byte("gitlab discussion " + discussion))
	return int64(f.Sum64()>>2) | 1<<62
}
