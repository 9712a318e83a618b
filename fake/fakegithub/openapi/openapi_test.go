package openapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/prq-dev/prq/fake/fakegithub/openapi"
)

func descriptions(t *testing.T) []*openapi.Description {
	t.Helper()
	v, err := openapi.Load()
	if err != nil {
		t.Fatal(err)
	}
	if v.Dotcom() == nil || v.Enterprise() == nil {
		t.Fatalf("operations.json lacks api.github.com or an Enterprise Server: %+v", v.Descriptions)
	}
	return []*openapi.Description{v.Dotcom(), v.Enterprise()}
}

// check runs r against both descriptions and returns the violations of
// the first (they agree on every operation prq uses).
func check(t *testing.T, r openapi.Request, mode openapi.Mode) []string {
	t.Helper()
	ds := descriptions(t)
	var first []string
	for i, d := range ds {
		_, got := d.Check(r, mode)
		if i == 0 {
			first = got
		} else if a, b := fmt.Sprint(first), strings.ReplaceAll(fmt.Sprint(got), d.Name, ds[0].Name); a != b {
			t.Errorf("%s says %q, %s %q", ds[0].Name, first, d.Name, got)
		}
	}
	return first
}

const repo = "/repos/acme/api"

// TestWrongSideIsNamed: a review comment on side "BOTH" fails, and the
// failure names the field and the value, whether sent alone (its schema
// enumerates LEFT and RIGHT) or in a review (GitHub's prose rule).
func TestWrongSideIsNamed(t *testing.T) {
	for _, tt := range []struct {
		name, path, body, want string
	}{
		{"single comment", repo + "/pulls/7/comments", `{"body":"b","commit_id":"abc","path":"a.go","line":2,"side":"BOTH"}`,
			`side: "BOTH" is not one of ["LEFT","RIGHT"]`},
		{"in a review", repo + "/pulls/7/reviews", `{"commit_id":"abc","body":"b","event":"COMMENT","comments":[{"path":"a.go","body":"b","line":2,"side":"BOTH"}]}`,
			`comments[0].side: "BOTH" is not one of ["LEFT","RIGHT"]`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := check(t, openapi.Request{Method: "POST", Path: tt.path, Body: []byte(tt.body)}, openapi.Strict)
			if len(got) != 1 || got[0] != tt.want {
				t.Fatalf("violations %q, want exactly %q", got, tt.want)
			}
			// the same body on a side GitHub takes passes
			ok := strings.Replace(tt.body, `"BOTH"`, `"RIGHT"`, 1)
			if got := check(t, openapi.Request{Method: "POST", Path: tt.path, Body: []byte(ok)}, openapi.Strict); len(got) != 0 {
				t.Fatalf("a right side: violations %q, want none", got)
			}
		})
	}
}

// TestRequests: what the description (and GitHub's prose rules and its
// documented exceptions) take and refuse, for the operations prq uses.
func TestRequests(t *testing.T) {
	for _, tt := range []struct {
		name string
		r    openapi.Request
		mode openapi.Mode
		want string // "" for none, else a violation that must be among them
	}{
		{"summary comment", openapi.Request{Method: "POST", Path: repo + "/issues/7/comments", Body: []byte(`{"body":"hi"}`)}, openapi.Strict, ""},
		{"comment without a body", openapi.Request{Method: "POST", Path: repo + "/issues/7/comments", Body: []byte(`{}`)}, openapi.AsGitHub, "body: is required"},
		{"comment body a number", openapi.Request{Method: "PATCH", Path: repo + "/issues/comments/12", Body: []byte(`{"body":12}`)}, openapi.AsGitHub, "body: is the number 12, want string"},
		{"no body where one is required", openapi.Request{Method: "POST", Path: repo + "/check-runs"}, openapi.AsGitHub, "checks/create takes a body and none was sent"},
		{"not JSON", openapi.Request{Method: "POST", Path: repo + "/issues/7/comments", Body: []byte(`{"body":`)}, openapi.AsGitHub, "the body is not JSON"},
		{"a misspelt member, strict", openapi.Request{Method: "POST", Path: repo + "/issues/7/comments", Body: []byte(`{"body":"b","bdy":"c"}`)}, openapi.Strict,
			"bdy: is not in the description (GitHub ignores it)"},
		{"a misspelt member, as GitHub", openapi.Request{Method: "POST", Path: repo + "/issues/7/comments", Body: []byte(`{"body":"b","bdy":"c"}`)}, openapi.AsGitHub, ""},
		{"check run queued", openapi.Request{Method: "POST", Path: repo + "/check-runs", Body: []byte(`{"name":"prq review","head_sha":"abc","status":"queued","output":{"title":"t","summary":"s"}}`)}, openapi.Strict, ""},
		{"check run status unknown", openapi.Request{Method: "POST", Path: repo + "/check-runs", Body: []byte(`{"name":"n","head_sha":"abc","status":"done"}`)}, openapi.AsGitHub,
			`status: "done" is not one of ["queued","in_progress","completed"]`},
		{"check run summary too long", openapi.Request{Method: "PATCH", Path: repo + "/check-runs/5", Body: []byte(`{"output":{"title":"t","summary":"` + strings.Repeat("é", 65536) + `"}}`)}, openapi.AsGitHub,
			"output.summary: has 65536 characters, want at most 65535"},
		{"check run completed without a conclusion", openapi.Request{Method: "PATCH", Path: repo + "/check-runs/5", Body: []byte(`{"name":"n","status":"completed"}`)}, openapi.AsGitHub,
			"the body: matches none of its 2 alternatives (the first: conclusion: is required)"},
		{"check run completed", openapi.Request{Method: "PATCH", Path: repo + "/check-runs/5", Body: []byte(`{"name":"n","status":"completed","conclusion":"neutral","details_url":"https://github.com/x"}`)}, openapi.Strict, ""},
		{"check run started_at not a time", openapi.Request{Method: "PATCH", Path: repo + "/check-runs/5", Body: []byte(`{"started_at":"yesterday"}`)}, openapi.AsGitHub,
			`started_at: "yesterday" is not a date-time (RFC 3339)`},
		{"annotations over 50", openapi.Request{Method: "PATCH", Path: repo + "/check-runs/5", Body: []byte(`{"output":{"title":"t","summary":"s","annotations":[` + strings.TrimSuffix(strings.Repeat(`{"path":"a","start_line":1,"end_line":1,"annotation_level":"notice","message":"m"},`, 51), ",") + `]}}`)}, openapi.AsGitHub,
			"output.annotations: has 51 items, want at most 50"},
		{"review", openapi.Request{Method: "POST", Path: repo + "/pulls/7/reviews", Body: []byte(`{"commit_id":"abc","body":"b","event":"COMMENT","comments":[{"path":"a.go","body":"c","line":3,"side":"RIGHT","start_line":2,"start_side":"RIGHT"}]}`)}, openapi.Strict, ""},
		{"COMMENT review without a body", openapi.Request{Method: "POST", Path: repo + "/pulls/7/reviews", Body: []byte(`{"commit_id":"abc","event":"COMMENT"}`)}, openapi.AsGitHub,
			"body: is required when event is COMMENT"},
		{"multi-line without start_side", openapi.Request{Method: "POST", Path: repo + "/pulls/7/reviews", Body: []byte(`{"body":"b","event":"COMMENT","comments":[{"path":"a.go","body":"c","line":3,"start_line":2}]}`)}, openapi.AsGitHub,
			"comments[0].start_side: is required with start_line (a multi-line comment)"},
		{"review comment line a string", openapi.Request{Method: "POST", Path: repo + "/pulls/7/reviews", Body: []byte(`{"body":"b","event":"COMMENT","comments":[{"path":"a.go","body":"c","line":"3"}]}`)}, openapi.AsGitHub,
			`comments[0].line: is a string "3", want integer`},
		{"review comment without a path", openapi.Request{Method: "POST", Path: repo + "/pulls/7/reviews", Body: []byte(`{"body":"b","event":"COMMENT","comments":[{"body":"c","line":3}]}`)}, openapi.AsGitHub,
			"comments[0].path: is required"},
		{"single comment without commit_id", openapi.Request{Method: "POST", Path: repo + "/pulls/7/comments", Body: []byte(`{"body":"b","path":"a.go","line":2}`)}, openapi.AsGitHub, "commit_id: is required"},
		{"reply needs only its body", openapi.Request{Method: "POST", Path: repo + "/pulls/7/comments", Body: []byte(`{"body":"b","in_reply_to":41}`)}, openapi.Strict, ""},
		{"reply without a body", openapi.Request{Method: "POST", Path: repo + "/pulls/7/comments", Body: []byte(`{"in_reply_to":41}`)}, openapi.AsGitHub, "body: is required"},
		{"list files", openapi.Request{Method: "GET", Path: repo + "/pulls/7/files", RawQuery: "per_page=100&page=2"}, openapi.Strict, ""},
		{"page not a number", openapi.Request{Method: "GET", Path: repo + "/pulls/7/files", RawQuery: "page=two"}, openapi.AsGitHub, `query parameter page: is a string "two", want integer`},
		{"undeclared query parameter", openapi.Request{Method: "GET", Path: repo + "/pulls/7/files", RawQuery: "sort=asc"}, openapi.AsGitHub, "query parameter sort: not in the description of pulls/list-files"},
		{"pull number not a number", openapi.Request{Method: "GET", Path: repo + "/pulls/seven"}, openapi.AsGitHub, `path parameter pull_number: is a string "seven", want integer`},
		{"no such operation", openapi.Request{Method: "DELETE", Path: repo + "/pulls/7"}, openapi.AsGitHub, "DELETE /repos/acme/api/pulls/7: no such operation in api.github.com"},
		{"check runs by name", openapi.Request{Method: "GET", Path: repo + "/commits/abc/check-runs", RawQuery: "check_name=prq+review"}, openapi.Strict, ""},
		{"a diff of a pull request", openapi.Request{Method: "GET", Path: repo + "/pulls/7", Accept: "application/vnd.github.diff"}, openapi.Strict, ""},
		{"a diff of a comparison", openapi.Request{Method: "GET", Path: repo + "/compare/a...b", Accept: "application/vnd.github.diff"}, openapi.Strict, ""},
		{"a diff of a file list", openapi.Request{Method: "GET", Path: repo + "/pulls/7/files", Accept: "application/vnd.github.diff"}, openapi.AsGitHub,
			"Accept application/vnd.github.diff: pulls/list-files answers only application/json"},
		{"a graduated preview", openapi.Request{Method: "GET", Path: repo + "/issues/7/comments", Accept: "application/vnd.github.squirrel-girl-preview"}, openapi.Strict, ""},
		{"a preview with no name", openapi.Request{Method: "GET", Path: repo + "/issues/7/comments", Accept: "application/vnd.github.-preview"}, openapi.AsGitHub,
			"Accept application/vnd.github.-preview: issues/list-comments answers only application/json"},
		{"a token with options", openapi.Request{Method: "POST", Path: "/app/installations/3/access_tokens", Body: []byte(`{}`)}, openapi.Strict, ""},
		{"a token, body null", openapi.Request{Method: "POST", Path: "/app/installations/3/access_tokens", Body: []byte(`null`)}, openapi.AsGitHub, "the body: is null, want object"},
		{"GitHub's JSON media type", openapi.Request{Method: "GET", Path: repo + "/pulls/7", Accept: "application/vnd.github.v3+json"}, openapi.Strict, ""},
		{"a Link header's path", openapi.Request{Method: "GET", Path: "/repositories/1300192/issues/7/comments", RawQuery: "per_page=100&page=2"}, openapi.Strict, ""},
		{"a Link header's path, bad page", openapi.Request{Method: "GET", Path: "/repositories/1300192/issues/7/comments", RawQuery: "page=x"}, openapi.AsGitHub, `query parameter page: is a string "x", want integer`},
		{"a token", openapi.Request{Method: "POST", Path: "/app/installations/3/access_tokens"}, openapi.Strict, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := check(t, tt.r, tt.mode)
			if tt.want == "" {
				if len(got) != 0 {
					t.Fatalf("violations %q, want none", got)
				}
				return
			}
			for _, g := range got {
				if g == tt.want || strings.HasPrefix(g, tt.want) {
					return
				}
			}
			t.Fatalf("violations %q, want %q among them", got, tt.want)
		})
	}
}

// TestSchemaKeywords: each keyword the validator checks, on a schema of
// its own (the vendored schemas use only some of them today).
func TestSchemaKeywords(t *testing.T) {
	for _, tt := range []struct {
		schema, value string
		want          string // "" for valid
	}{
		{`{"type":"integer"}`, `3`, ""},
		{`{"type":"integer"}`, `3.5`, "the body: is the number 3.5, want integer"},
		{`{"type":"number","minimum":1,"maximum":2}`, `0.5`, "the body: 0.5 is below the minimum 1"},
		{`{"type":"number","minimum":1,"maximum":2}`, `3`, "the body: 3 is above the maximum 2"},
		{`{"type":"string","minLength":2}`, `"a"`, "the body: has 1 characters, want at least 2"},
		{`{"type":"string","pattern":"^[a-f0-9]{40}$"}`, `"xyz"`, `the body: "xyz" does not match ^[a-f0-9]{40}$`},
		{`{"type":"string","format":"uri"}`, `"not a uri"`, `the body: "not a uri" is not a uri (an absolute URI)`},
		{`{"type":"string"}`, `null`, "the body: is null, want string"},
		{`{"type":"string","nullable":true}`, `null`, ""},
		{`{"nullable":true}`, `null`, ""}, // nullable without a type, as some of GitHub's schemas have it
		{`{"type":["string","null"]}`, `null`, ""},
		{`{"type":"boolean"}`, `"true"`, `the body: is a string "true", want boolean`},
		{`{"type":"array","minItems":1,"items":{"type":"string"}}`, `[]`, "the body: has 0 items, want at least 1"},
		{`{"type":"array","items":{"type":"string"}}`, `["a",2]`, "[1]: is the number 2, want string"},
		{`{"type":"object","additionalProperties":false,"properties":{"a":{}}}`, `{"a":1,"b":2}`, "b: is not a member the description allows"},
		{`{"type":"object","additionalProperties":{"type":"string"}}`, `{"a":"x","b":2}`, "b: is the number 2, want string"},
		{`{"oneOf":[{"type":"string"},{"type":"integer"}]}`, `1`, ""},
		{`{"oneOf":[{"type":"number"},{"type":"integer"}]}`, `1`, "the body: matches 2 of its alternatives, want exactly one"},
		{`{"anyOf":[{"type":"string"},{"type":"integer"}]}`, `true`, "the body: matches none of its 2 alternatives (the first: the body: is a boolean, want string)"},
		{`{"allOf":[{"required":["a"]},{"required":["b"]}]}`, `{"a":1}`, "b: is required"},
		{`{"enum":[1,2]}`, `2`, ""},
		{`{"enum":["a"]}`, `"b"`, `the body: "b" is not one of ["a"]`},
	} {
		t.Run(tt.schema+" "+tt.value, func(t *testing.T) {
			var s openapi.Schema
			if err := json.Unmarshal([]byte(tt.schema), &s); err != nil {
				t.Fatal(err)
			}
			v, err := openapi.Decode([]byte(tt.value))
			if err != nil {
				t.Fatal(err)
			}
			got := s.Validate(v, openapi.AsGitHub)
			if tt.want == "" && len(got) != 0 || tt.want != "" && (len(got) != 1 || got[0] != tt.want) {
				t.Fatalf("violations %q, want %q", got, tt.want)
			}
		})
	}
}
