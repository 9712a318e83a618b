package harness

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/fake/fakegithub/openapi"
)

// checkRequests records every request prq makes to the fake GitHub in
// the test and, when the test ends, checks each against GitHub's REST
// description, api.github.com's and the newest Enterprise Server's
// (fake/fakegithub/openapi: method, path, path and query parameters,
// media types, and the body against its schema, strictly: a member the
// schema does not name fails too, since GitHub would silently ignore it).
// Register it before the stack's own cleanup, so it runs after the stack
// stopped.
func checkRequests(t *testing.T, gh *fakegithub.Server) {
	t.Helper()
	v, err := openapi.Load()
	if err != nil {
		t.Fatal(err)
	}
	gh.RecordRequests()
	t.Cleanup(func() {
		reqs := gh.Requests()
		violations, ops := conformance(v, reqs)
		for _, msg := range violations {
			t.Error(msg)
		}
		if len(violations) == 0 {
			t.Logf("%d requests to GitHub, each as GitHub's REST description (%s, %s; @octokit/openapi %s) has it: %s", len(reqs), v.Dotcom().Name, v.Enterprise().Name, v.Source.Version, strings.Join(ops, " "))
		}
	})
}

var index = regexp.MustCompile(`\[\d+\]`)

// conformance returns one line per distinct violation (with how many
// requests had it and the first of them), and the operations requested.
func conformance(v *openapi.Vendored, reqs []fakegithub.Request) (violations, operations []string) {
	type seen struct {
		n     int    // requests with it
		last  int    // the last request counted
		msg   string // the first violation as it was, indices and all
		first fakegithub.Request
	}
	found := map[string]*seen{}
	used := map[string]bool{}
	for i, r := range reqs {
		if strings.HasPrefix(r.APIPath(), "/_fake/") {
			continue // the fake's own pages
		}
		if p := r.APIPath(); p == "/graphql" || p == "/api/graphql" {
			continue // GraphQL, not REST: the fake checks each query against GitHub's schema
		}
		for _, d := range []*openapi.Description{v.Dotcom(), v.Enterprise()} {
			op, errs := d.Check(openapi.Request{Method: r.Method, Path: r.APIPath(), RawQuery: r.RawQuery, Accept: r.Accept, ContentType: r.ContentType, Body: r.Body}, openapi.Strict)
			name := "(no operation)"
			if op != nil {
				name = op.OperationID
				used[name] = true
			}
			for _, e := range errs {
				// one line per kind of violation: comments[0] and comments[9] alike
				k := fmt.Sprintf("%s %s: %s", d.Name, name, index.ReplaceAllString(e, "[i]"))
				if found[k] == nil {
					found[k] = &seen{msg: fmt.Sprintf("%s %s: %s", d.Name, name, e), first: r, last: -1}
				}
				if found[k].last != i {
					found[k].n++
					found[k].last = i
				}
			}
		}
	}
	for op := range used {
		operations = append(operations, op)
	}
	sort.Strings(operations)
	for _, s := range found {
		body := string(s.first.Body)
		if len(body) > 200 {
			body = body[:200] + "…"
		}
		violations = append(violations, fmt.Sprintf("not as GitHub's description has it: %s (%d requests; the first: %s %s?%s answered %d, body %s)", s.msg, s.n, s.first.Method, s.first.Path, s.first.RawQuery, s.first.Status, body))
	}
	sort.Strings(violations)
	return violations, operations
}
