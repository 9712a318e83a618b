package chaos

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/safemd"
)

// TestSoakBound: the soak's Redis memory per retained PR is held to the
// documented bound plus 10%, and any prq key without a TTL is a problem.
func TestSoakBound(t *testing.T) {
	const kb = 1024
	for _, tc := range []struct {
		name    string
		perPR   float64 // KB left per PR
		missing []string
		scan    error
		want    string // a problem containing this; "" for none
	}{
		{"at the bound", soakKBPerPR, nil, nil, ""},
		{"within 10%", soakKBPerPR * 1.09, nil, nil, ""},
		{"past 10%", soakKBPerPR * 1.12, nil, nil, "per retained PR after the drain, over the bound"},
		{"a key without a TTL", soakKBPerPR, []string{"prq:pr:1.a.b.1:results:h1"}, nil, "1 prq keys without a TTL after the soak: prq:pr:1.a.b.1:results:h1"},
		{"scan failed", soakKBPerPR, nil, errors.New("boom"), "scan for keys without a TTL: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := chaosReport{Scenario: "soak", PRs: 300, Baseline: 2 << 20, BoundPerPR: soakKBPerPR * kb}
			r.AfterDrain = r.Baseline + int64(tc.perPR*kb*300)
			r.checkSoak(tc.missing, tc.scan)
			got := strings.Join(r.Problems, "\n")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("problems %q, want %q", got, tc.want)
			}
			r.Samples = []soakSample{{RedisMem: r.AfterDrain}}
			var out bytes.Buffer
			printChaos(&out, r)
			if !strings.Contains(out.String(), "retained PRs = ") || !strings.Contains(out.String(), "bound 24.0 KB, a problem past 26.4 KB") {
				t.Fatalf("report:\n%s", out.String())
			}
		})
	}
}

// TestLiveGitLab: the chaos checker finds every quick action, mention and
// reference GitLab would act on, and none that prq's escaping (safemd)
// left inert: the model's injected text, escaped, passes.
func TestLiveGitLab(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"a quick action", "fine\n/merge\n", "/merge"},
		{"a quick action in a fence", "```\n/approve\n```", "/approve"},
		{"@all", "cc @all", "@all"},
		{"a user", "thanks @octocat for it", "@octocat"},
		{"an issue", "see #12", "#12"},
		{"a merge request", "as in !3", "!3"},
		{"a label", "tag ~bug", "~bug"},
		{"a milestone", "for %v1", "%v1"},
		{"an epic", "in &4", "&4"},
		{"a snippet", "from $5", "$5"},
		{"in a code span", "cc `@all` and `#12`", ""},
		{"escaped", "\\/merge and \\`x\\` then `!3`", ""},
		{"a quick action indented in a fence", "```\n /merge\n```", ""},
		{"in a comment", "<!-- prq:review head=ab @all #1 -->", ""},
		{"in a word", "a@b mail, x#1, 50% more, ~/dir", ""},
		{"the injection escaped", safemd.GitLab(safemd.Text(fakeopenai.GitLabInjection, "acme/api")), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := liveGitLab(tc.body); got != tc.want {
				t.Fatalf("liveGitLab(%q) = %q, want %q", tc.body, got, tc.want)
			}
		})
	}
}
