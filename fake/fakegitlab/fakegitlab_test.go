package fakegitlab_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegitlab"
)

const (
	proj = "acme/api"
	// line 1 context, 2 deleted, 2 added
	patch = "@@ -1,2 +1,2 @@\n keep\n-old\n+new\n"
)

type client struct {
	t     *testing.T
	base  string
	token string
}

func setup(t *testing.T, cfg fakegitlab.Config) (*fakegitlab.Server, client) {
	t.Helper()
	f := fakegitlab.New(cfg)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	f.AddToken("tok-bot", "project_1_bot_ab12")
	f.AddToken("tok-alice", "alice")
	f.AddProject(proj, "main", "base1", map[string]string{"README.md": "hi\n"})
	p := patch
	if err := f.AddMR(proj, 1, "alice", corpus.PR{Title: "t", HeadSHA: "head1", BaseSHA: "base1", Files: []corpus.File{{Filename: "a.go", Patch: &p}}}); err != nil {
		t.Fatal(err)
	}
	return f, client{t: t, base: srv.URL + "/api/v4/projects/" + url.PathEscape(proj), token: "tok-bot"}
}

func (c client) do(method, path string, body any) (int, http.Header, map[string]any, []any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	r, _ := http.NewRequest(method, c.base+path, rd)
	r.Header.Set("PRIVATE-TOKEN", c.token)
	r.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var obj map[string]any
	var list []any
	if json.Unmarshal(raw, &obj) != nil {
		json.Unmarshal(raw, &list)
	}
	return resp.StatusCode, resp.Header, obj, list
}

func pos(old, new int) map[string]any {
	p := map[string]any{"position_type": "text", "base_sha": "base1", "start_sha": "base1", "head_sha": "head1", "old_path": "a.go", "new_path": "a.go"}
	if old > 0 {
		p["old_line"] = old
	}
	if new > 0 {
		p["new_line"] = new
	}
	return p
}

func TestPositions(t *testing.T) {
	_, c := setup(t, fakegitlab.Config{})
	cases := []struct {
		name     string
		old, new int
		status   int
	}{
		{"added line: new_line alone", 0, 2, http.StatusCreated},
		{"deleted line: old_line alone", 2, 0, http.StatusCreated},
		{"context line: both", 1, 1, http.StatusCreated},
		{"context line given new_line alone", 0, 1, http.StatusBadRequest},
		{"added line given both", 2, 2, http.StatusBadRequest},
		{"a line outside the diff", 0, 9, http.StatusBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, obj, _ := c.do("POST", "/merge_requests/1/discussions", map[string]any{"body": "x", "position": pos(tc.old, tc.new)})
			if code != tc.status {
				t.Errorf("status %d, want %d (%v)", code, tc.status, obj)
			}
			if code == http.StatusBadRequest && !strings.Contains(fmt.Sprint(obj["message"]), "line_code") {
				t.Errorf("error shape %v, want GitLab's message", obj)
			}
		})
	}
	stale := pos(0, 2)
	stale["head_sha"] = "elsewhere"
	if code, _, _, _ := c.do("POST", "/merge_requests/1/discussions", map[string]any{"body": "x", "position": stale}); code != http.StatusBadRequest {
		t.Errorf("a position on no diff version: %d, want 400", code)
	}
}

func TestDraftsAreTheirAuthors(t *testing.T) {
	f, c := setup(t, fakegitlab.Config{})
	if code, _, _, _ := c.do("POST", "/merge_requests/1/draft_notes", map[string]any{"note": "finding", "position": pos(0, 2)}); code != http.StatusCreated {
		t.Fatalf("draft: %d", code)
	}
	alice := client{t: t, base: c.base, token: "tok-alice"}
	if _, _, _, list := alice.do("GET", "/merge_requests/1/draft_notes", nil); len(list) != 0 {
		t.Errorf("alice sees the bot's drafts: %v", list)
	}
	if n := len(f.Notes(proj, 1)); n != 0 {
		t.Errorf("a draft is visible before its publish: %d notes", n)
	}
	if code, _, _, _ := c.do("POST", "/merge_requests/1/draft_notes/bulk_publish", nil); code != http.StatusNoContent {
		t.Errorf("publish: %d", code)
	}
	if ns := f.Notes(proj, 1); len(ns) != 1 || !ns[0].DiffNote || ns[0].NewLine != 2 {
		t.Errorf("published: %+v", ns)
	}
}

func TestStatusTransitions(t *testing.T) {
	_, c := setup(t, fakegitlab.Config{})
	set := func(state string) (int, string) {
		code, _, obj, _ := c.do("POST", "/statuses/head1", map[string]any{"state": state, "name": "prq review"})
		return code, fmt.Sprint(obj["message"])
	}
	for _, step := range []struct {
		state  string
		status int
	}{{"pending", 201}, {"running", 201}, {"running", 400}, {"pending", 400}, {"success", 201}, {"running", 201}} {
		if code, msg := set(step.state); code != step.status {
			t.Errorf("%s: %d %s, want %d", step.state, code, msg, step.status)
		}
	}
	if code, msg := set("running"); !strings.Contains(msg, "Cannot transition status via :run from :running") || code != 400 {
		t.Errorf("same transition: %d %q", code, msg)
	}
	_, _, _, list := c.do("GET", "/repository/commits/head1/statuses?name=prq+review", nil)
	if len(list) != 2 {
		t.Errorf("%d statuses, want the finished one and the new one", len(list))
	}
}

func TestPagingAndErrors(t *testing.T) {
	f, c := setup(t, fakegitlab.Config{})
	for i := range 45 {
		f.AddNote(proj, 1, "alice", fmt.Sprint("note ", i))
	}
	code, h, _, list := c.do("GET", "/merge_requests/1/notes?per_page=20&page=2", nil)
	if code != 200 || len(list) != 20 || h.Get("X-Next-Page") != "3" || h.Get("X-Total") != "45" || h.Get("X-Total-Pages") != "3" || h.Get("X-Prev-Page") != "1" {
		t.Errorf("page 2: %d, %d items, headers %v", code, len(list), h)
	}
	if _, h, _, list := c.do("GET", "/merge_requests/1/notes?per_page=20&page=3", nil); len(list) != 5 || h.Get("X-Next-Page") != "" {
		t.Errorf("last page: %d items, next %q", len(list), h.Get("X-Next-Page"))
	}
	if code, _, obj, _ := c.do("GET", "/merge_requests/99", nil); code != 404 || obj["message"] == nil {
		t.Errorf("absent merge request: %d %v", code, obj)
	}
	nobody := client{t: t, base: c.base, token: "wrong"}
	if code, _, obj, _ := nobody.do("GET", "/merge_requests/1", nil); code != 401 || obj["message"] != "401 Unauthorized" {
		t.Errorf("bad token: %d %v", code, obj)
	}
}

func TestRateLimit(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	_, c := setup(t, fakegitlab.Config{RequestsPerPeriod: 3, Period: time.Minute, NowFunc: func() time.Time { return now }})
	for i := range 3 {
		if code, h, _, _ := c.do("GET", "/merge_requests/1", nil); code != 200 || h.Get("RateLimit-Remaining") != fmt.Sprint(2-i) {
			t.Fatalf("request %d: %d, remaining %q", i, code, h.Get("RateLimit-Remaining"))
		}
	}
	code, h, _, _ := c.do("GET", "/merge_requests/1", nil)
	if code != http.StatusTooManyRequests || h.Get("Retry-After") != "60" || h.Get("RateLimit-Reset") != fmt.Sprint(now.Add(time.Minute).Unix()) {
		t.Errorf("over the limit: %d, headers %v", code, h)
	}
	now = now.Add(time.Minute)
	if code, _, _, _ := c.do("GET", "/merge_requests/1", nil); code != 200 {
		t.Errorf("after the window: %d", code)
	}
}

func TestQuickActionsRun(t *testing.T) {
	f, _ := setup(t, fakegitlab.Config{})
	f.AddNote(proj, 1, "alice", "ok\n```\n/merge\n```\n\\/close\n/close")
	if got := f.Executed(); len(got) != 1 || !strings.HasSuffix(got[0], "/close") {
		t.Errorf("executed %q, want the one live /close", got)
	}
}
