package fakegithub_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/fake/fakegithub/openapi"
)

// TestEveryRouteIsInGitHubsDescription: each endpoint the fake serves is
// an operation of api.github.com's description and of the newest
// Enterprise Server's (operations.json vendors exactly these).
func TestEveryRouteIsInGitHubsDescription(t *testing.T) {
	v, err := openapi.Load()
	if err != nil {
		t.Fatal(err)
	}
	routes := fakegithub.New(fakegithub.Config{}).Routes()
	for _, d := range []*openapi.Description{v.Dotcom(), v.Enterprise()} {
		if len(d.Operations) != len(routes) {
			t.Errorf("%s: %d operations vendored for %d routes (go generate ./fake/fakegithub/openapi)", d.Name, len(d.Operations), len(routes))
		}
		for _, rt := range routes {
			// a path with a value in each parameter's place
			path := strings.NewReplacer("{owner}", "o", "{repo}", "r", "{n}", "7", "{id}", "7", "{basehead}", "a...b", "{ref}", "abc", "{code}", "c0de").Replace(rt.Path)
			if op, _ := d.Find(rt.Method, path); op == nil {
				t.Errorf("%s: %s %s (%s) is not in the description", d.Name, rt.Method, rt.Path, path)
			}
		}
	}
}

// TestRefusesWhatTheDescriptionRefuses: a body GitHub's description
// refuses gets GitHub's 422 "Invalid request." naming the field, under
// the Enterprise path as on api.github.com, before the fake's own rules.
func TestRefusesWhatTheDescriptionRefuses(t *testing.T) {
	for _, prefix := range []string{"", "/api/v3"} {
		k, _ := testKey(t)
		fake := fakegithub.New(fakegithub.Config{AppID: 42, PublicKey: &k.PublicKey})
		fake.AddPR(1, "", "", bigPR(2))
		srv := httptest.NewServer(fake)
		tok := mintToken(t, srv.URL+prefix, 1)
		for _, tt := range []struct {
			method, path, body, want string
		}{
			{"POST", "/repos/acme/big/check-runs", `{"name":"n","head_sha":"` + strings.Repeat("a", 40) + `","status":"done"}`,
				`status: "done" is not one of ["queued","in_progress","completed"]`},
			{"POST", "/repos/acme/big/pulls/7/reviews", `{"body":"b","event":"COMMENT","comments":[{"path":"f0000.go","body":"c","line":1,"side":"BOTH"}]}`,
				`comments[0].side: "BOTH" is not one of ["LEFT","RIGHT"]`},
			{"POST", "/repos/acme/big/pulls/7/reviews", `{"event":"COMMENT"}`, "body: is required when event is COMMENT"},
			{"POST", "/repos/acme/big/pulls/7/comments", `{"body":"b","path":"f0000.go","line":1}`, "commit_id: is required"},
			{"PATCH", "/repos/acme/big/issues/comments/1", `{"body":7}`, "body: is the number 7, want string"},
		} {
			req, _ := http.NewRequest(tt.method, srv.URL+prefix+tt.path, strings.NewReader(tt.body))
			req.Header.Set("Authorization", "token "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e struct {
				Message, Status  string
				DocumentationURL string `json:"documentation_url"`
			}
			if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != 422 || e.Status != "422" || e.DocumentationURL == "" ||
				!strings.HasPrefix(e.Message, "Invalid request.\n\n") || !strings.Contains(e.Message, tt.want) {
				t.Errorf("%s %s%s: %d %s, want 422 naming %q", tt.method, prefix, tt.path, resp.StatusCode, b, tt.want)
			}
		}
		srv.Close()
	}
}
