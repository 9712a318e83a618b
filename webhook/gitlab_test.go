package webhook_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegitlab"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/webhook"
)

const glProject = "acme/platform/api"

func glSetup(t *testing.T) (*fakegitlab.Server, *recorder, http.Handler, int64) {
	t.Helper()
	fake := fakegitlab.New(fakegitlab.Config{})
	fake.AddProject(glProject, "main", "base1", nil)
	fake.AddProject("other/x", "main", "base1", nil)
	p := "@@ -1 +1 @@\n-a\n+b\n"
	for _, proj := range []string{glProject, "other/x"} {
		if err := fake.AddMR(proj, 5, "alice", corpus.PR{Title: "t", HeadSHA: "head1", BaseSHA: "base1", Files: []corpus.File{{Filename: "a.go", Patch: &p}}}); err != nil {
			t.Fatal(err)
		}
	}
	tenant, _ := jobs.GitLabTenant(7)
	rec := &recorder{}
	g, err := webhook.NewGitLab(webhook.GitLabConfig{Token: "shared", Tenants: []webhook.GitLabTenant{{ID: tenant, Path: "acme", Token: "acme-secret"}}}, newHandler(t, rec))
	if err != nil {
		t.Fatal(err)
	}
	return fake, rec, g, tenant
}

func glSend(t *testing.T, h http.Handler, token, event, key string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	r, err := fakegitlab.Delivery("http://prq/webhook/gitlab", token, event, key, body)
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestGitLabMergeRequestHook(t *testing.T) {
	fake, rec, h, tenant := glSetup(t)
	open, _ := fake.MergeRequestHook(glProject, 5, "open", "")
	if w := glSend(t, h, "acme-secret", fakegitlab.EventMergeRequest, "k1", open); w.Code != http.StatusAccepted {
		t.Fatalf("open: %d %s", w.Code, w.Body)
	}
	// GitLab retries with the same Idempotency-Key: the same delivery
	glSend(t, h, "acme-secret", fakegitlab.EventMergeRequest, "k1", open)
	if len(rec.plans) != 2 || rec.plans[0].Delivery != rec.plans[1].Delivery || jobs.PlanTaskID(rec.plans[0]) != jobs.PlanTaskID(rec.plans[1]) {
		t.Errorf("a retried delivery must keep its plan's task id: %+v", rec.plans)
	}
	want := jobs.PR{Installation: tenant, Owner: "acme/platform", Repo: "api", Number: 5}
	if p := rec.plans[0]; p.PR != want || p.Action != "opened" || p.HeadSHA != "head1" || p.PR.Forge() != jobs.ForgeGitLab {
		t.Errorf("plan = %+v", p)
	}
	if err := fake.Push(glProject, 5, "head2", nil); err != nil {
		t.Fatal(err)
	}
	push, _ := fake.MergeRequestHook(glProject, 5, "update", "head1")
	glSend(t, h, "acme-secret", fakegitlab.EventMergeRequest, "k2", push)
	if p := rec.plans[len(rec.plans)-1]; p.Action != "synchronize" || p.Before != "head1" || p.HeadSHA != "head2" {
		t.Errorf("push: %+v", p)
	}
	// a title edit is an update without oldrev: not a push
	edit, _ := fake.MergeRequestHook(glProject, 5, "update", "")
	if w := glSend(t, h, "acme-secret", fakegitlab.EventMergeRequest, "k3", edit); w.Code != http.StatusOK || len(rec.plans) != 3 {
		t.Errorf("title edit: %d, %d plans", w.Code, len(rec.plans))
	}
	// marked ready: planned
	ready := withChanges(t, edit, map[string]any{"draft": map[string]bool{"previous": true, "current": false}})
	glSend(t, h, "acme-secret", fakegitlab.EventMergeRequest, "k4", ready)
	if p := rec.plans[len(rec.plans)-1]; p.Action != "ready_for_review" {
		t.Errorf("ready: %+v", p)
	}
	for i, action := range []string{"close", "merge"} {
		b, _ := fake.MergeRequestHook(glProject, 5, action, "")
		if w := glSend(t, h, "acme-secret", fakegitlab.EventMergeRequest, "c"+action, b); w.Code != http.StatusOK || len(rec.cancels) != i+1 {
			t.Errorf("%s: %d, cancels %d", action, w.Code, len(rec.cancels))
		}
	}
}

func withChanges(t *testing.T, body []byte, changes map[string]any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	m["changes"] = changes
	out, _ := json.Marshal(m)
	return out
}

func TestGitLabRefusals(t *testing.T) {
	fake, rec, h, _ := glSetup(t)
	open, _ := fake.MergeRequestHook(glProject, 5, "open", "")
	other, _ := fake.MergeRequestHook("other/x", 5, "open", "")
	cases := []struct {
		name, token, key string
		body             []byte
		status           int
	}{
		{"wrong token", "nope", "r1", open, http.StatusUnauthorized},
		{"the shared token where the tenant has its own", "shared", "r2", open, http.StatusUnauthorized},
		{"no token", "", "r3", open, http.StatusUnauthorized},
		{"a project of no tenant", "shared", "r4", other, http.StatusOK},
		{"a project of no tenant, a tenant's token", "acme-secret", "r6", other, http.StatusOK},
		{"an event without a project", "acme-secret", "r7", []byte(`{"object_kind":"member"}`), http.StatusOK},
		{"an event without a project, a wrong token", "nope", "r8", []byte(`{"object_kind":"member"}`), http.StatusUnauthorized},
		{"no delivery id", "acme-secret", "", open, http.StatusBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := fakegitlab.Delivery("http://prq/webhook/gitlab", tc.token, fakegitlab.EventMergeRequest, tc.key, tc.body)
			if tc.key == "" {
				r.Header.Del("Idempotency-Key")
				r.Header.Del("X-Gitlab-Event-UUID")
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.status {
				t.Errorf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
		})
	}
	if rec.total() != 0 {
		t.Errorf("refused deliveries made work: %+v", rec.plans)
	}
	rec.fail = errors.New("redis down")
	if w := glSend(t, h, "acme-secret", fakegitlab.EventMergeRequest, "r5", open); w.Code != http.StatusServiceUnavailable {
		t.Errorf("work not saved: %d, want 503", w.Code)
	}
}

func TestGitLabNoteHook(t *testing.T) {
	fake, rec, h, _ := glSetup(t)
	send := func(author, body string) int {
		id := fake.AddNote(glProject, 5, author, body)
		b, err := fake.NoteHook(glProject, 5, id)
		if err != nil {
			t.Fatal(err)
		}
		return glSend(t, h, "acme-secret", fakegitlab.EventNote, fmt.Sprint("n", id), b).Code
	}
	if code := send("bob", "@prq-bot review"); code != http.StatusAccepted || len(rec.commands) != 1 || rec.commands[0].Name != jobs.CommandReview || !rec.commands[0].Review {
		t.Errorf("command: %d %+v", code, rec.commands)
	}
	if code := send("bob", "@prq-bot why is this slower?"); code != http.StatusAccepted || len(rec.chats) != 1 || rec.chats[0].Author != "bob" {
		t.Errorf("chat: %d %+v", code, rec.chats)
	}
	// the bot's own notes, and notes not to the bot, are never answered
	send("group_7_bot_1f2e3d", "@prq-bot review")
	send("group_7_bot2", "@prq-bot review")
	send("prq-service-user", "Commands: `@prq-bot <command>`\n\n<!-- prq:reply to=1 tag=ab -->")
	send("bob", "looks good")
	if len(rec.commands) != 1 || len(rec.chats) != 1 {
		t.Errorf("answered a note it must not: %+v %+v", rec.commands, rec.chats)
	}
	// learn goes to the worker with its author's GitLab user id: the
	// worker asks the members API for a Maintainer (GitLab's hook names
	// no role)
	send("bob", "@prq-bot learn use errors.Is")
	if c := rec.commands[len(rec.commands)-1]; c.Name != jobs.CommandLearn || c.Refused != "" || c.AuthorID <= 0 || c.Author != "bob" {
		t.Errorf("learn: %+v, want it enqueued with bob's user id", c)
	}
}

// TestGitLabReplyInAnsweredDiscussion: a note that does not mention the
// bot is chat when it is in a discussion the bot answered in (as a reply
// in a GitHub review thread the App answered in is), with the
// discussion's thread id for the answer to mark (the answer itself goes
// to the note's discussion: InReplyTo stays unset); in any other discussion
// it is ignored, and without a mention it is never a command.
func TestGitLabReplyInAnsweredDiscussion(t *testing.T) {
	fake, rec, h, _ := glSetup(t)
	send := func(id int64) int {
		b, err := fake.NoteHook(glProject, 5, id)
		if err != nil {
			t.Fatal(err)
		}
		return glSend(t, h, "acme-secret", fakegitlab.EventNote, fmt.Sprint("n", id), b).Code
	}
	asked := fake.AddNote(glProject, 5, "bob", "@prq-bot why is this slower?")
	if code := send(asked); code != http.StatusAccepted || len(rec.chats) != 1 {
		t.Fatalf("chat: %d %+v", code, rec.chats)
	}
	thread := rec.chats[0].Thread
	var discussion string
	for _, n := range fake.Notes(glProject, 5) {
		if n.ID == asked {
			discussion = n.Discussion
		}
	}
	if thread != webhook.GitLabThread(discussion) || thread < 1<<62 {
		t.Fatalf("the chat's thread %d, want the discussion's %d", thread, webhook.GitLabThread(discussion))
	}
	// before the bot answered: a reply without a mention is not for it
	if send(fake.AddReply(glProject, 5, "bob", asked, "and the memory?")); len(rec.chats) != 1 {
		t.Fatalf("a reply in a discussion the bot never answered in became chat: %+v", rec.chats)
	}
	rec.threads = map[int64]bool{thread: true} // the answer marked it (workers.ChatResponder)
	if code := send(fake.AddReply(glProject, 5, "bob", asked, "and the memory?")); code != http.StatusAccepted || len(rec.chats) != 2 || rec.chats[1].Thread != thread || rec.chats[1].InReplyTo != 0 {
		t.Fatalf("a reply in the bot's discussion: %d %+v", code, rec.chats)
	}
	send(fake.AddReply(glProject, 5, "bob", asked, "review"))
	if len(rec.commands) != 0 || len(rec.chats) != 3 {
		t.Errorf("a reply without a mention taken as a command: %+v", rec.commands)
	}
	if send(fake.AddNote(glProject, 5, "bob", "and here?")); len(rec.chats) != 3 {
		t.Errorf("a note in another discussion became chat: %+v", rec.chats)
	}
}

func TestGitLabTenantIDs(t *testing.T) {
	h := newHandler(t, &recorder{})
	if _, err := webhook.NewGitLab(webhook.GitLabConfig{Token: "x", Tenants: []webhook.GitLabTenant{{ID: 7, Path: "acme"}}}, h); err == nil {
		t.Error("a GitHub installation id taken as a GitLab tenant")
	}
	tenant, _ := jobs.GitLabTenant(7)
	if _, err := webhook.NewGitLab(webhook.GitLabConfig{Tenants: []webhook.GitLabTenant{{ID: tenant, Path: "acme"}}}, h); err == nil {
		t.Error("a tenant with no webhook token accepted")
	}
}

// FuzzGitLabHook: whatever a correctly tokened delivery holds, the
// receiver answers with one of its statuses and never panics.
func FuzzGitLabHook(f *testing.F) {
	fake := fakegitlab.New(fakegitlab.Config{})
	fake.AddProject(glProject, "main", "b", nil)
	fake.AddMR(glProject, 5, "alice", corpus.PR{HeadSHA: "h", BaseSHA: "b"})
	open, _ := fake.MergeRequestHook(glProject, 5, "open", "")
	note := fake.AddNote(glProject, 5, "bob", "@prq-bot review")
	nb, _ := fake.NoteHook(glProject, 5, note)
	for _, s := range [][]byte{open, nb, []byte(`{"object_kind":"merge_request","project":{"path_with_namespace":"acme/x"},"object_attributes":{"iid":-1,"action":"open","state":"opened"}}`), []byte("{}"), []byte("[")} {
		f.Add(fakegitlab.EventMergeRequest, s)
		f.Add(fakegitlab.EventNote, s)
	}
	tenant, _ := jobs.GitLabTenant(7)
	rec := &recorder{}
	h, err := webhook.NewGitLab(webhook.GitLabConfig{Token: "shared", Tenants: []webhook.GitLabTenant{{ID: tenant, Path: "acme"}}}, newHandler(f, rec))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, event string, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/webhook/gitlab", bytes.NewReader(body))
		r.Header.Set("X-Gitlab-Token", "shared")
		r.Header.Set("X-Gitlab-Event", event)
		r.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK, http.StatusAccepted, http.StatusBadRequest:
		default:
			t.Fatalf("status %d for %q %q", w.Code, event, body)
		}
	})
}
