package safemd

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

var (
	// What GitLab's reference filters link in rendered text (outside code).
	liveGitLab = regexp.MustCompile(`(^|[^A-Za-z0-9_])(@[A-Za-z0-9_]|[#!$&]\d|[~%][A-Za-z0-9_"])`)
	// GitLab's quick-action extractor: a line beginning with /command,
	// anywhere but inside a fenced block.
	quickRe = regexp.MustCompile(`(?m)^/[a-z_]+`)
	preRe   = regexp.MustCompile(`(?s)<pre[^>]*>.*?</pre>`)
)

// gitlabLive returns what would be live on GitLab in md: a quick action
// outside fences, a reference or mention outside code.
func gitlabLive(t *testing.T, md string) []string {
	t.Helper()
	var live []string
	inFence := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") || strings.HasPrefix(strings.TrimSpace(l), "~~~") {
			inFence = !inFence
			continue
		}
		if !inFence && quickRe.MatchString(l) {
			live = append(live, "quick action: "+l)
		}
	}
	html := codeRe.ReplaceAllString(preRe.ReplaceAllString(render(t, md), ""), "")
	html = tagRe.ReplaceAllString(html, " ")
	html = strings.NewReplacer("&amp;", "&", "&quot;", `"`, "&lt;", "<", "&gt;", ">").Replace(html)
	for _, m := range liveGitLab.FindAllString(html, -1) {
		live = append(live, "reference: "+m)
	}
	return live
}

func TestGitLabInert(t *testing.T) {
	cases := []struct{ name, model string }{
		{"quick actions", "/merge\n/approve\n  /close\n> /assign @me\n- /label ~bug"},
		{"quick action after text", "Looks fine.\n/merge"},
		{"mentions", "cc @all @alice @group/sub @_under"},
		{"issue and mr refs", "see #12, !34, acme/api!5 and acme/api#6"},
		{"labels and milestones", `~bug ~"needs review" %v1.0 %"Q4 release"`},
		{"epics and snippets", "&7 and $42 and acme&9"},
		{"quick action in a fence", "```\n/merge\n```\n"},
		{"unclosed fence", "```go\n/close"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// as prq posts it: model text through Text, inside prq's markup
			note := "<!-- prq:marker -->\n## prq review\n\n" + Text(tc.model, repo) + "\n"
			got := GitLab(note)
			if live := gitlabLive(t, got); len(live) > 0 {
				t.Errorf("live on GitLab: %q\nnote:\n%s", live, got)
			}
			if !strings.Contains(got, "<!-- prq:marker -->") {
				t.Errorf("the marker did not survive:\n%s", got)
			}
			if again := GitLab(got); again != got {
				t.Errorf("not idempotent:\n%s\nthen\n%s", got, again)
			}
		})
	}
}

// TestGitLabKeepsProse: ordinary prose and prq's own markup come through
// as they were.
func TestGitLabKeepsProse(t *testing.T) {
	for _, s := range []string{
		"## prq summary\n\n3 files at `abc1234`\n\n| File | Change |\n|---|---|\n| `a.go` | fixes 50% of it |\n",
		"<details><summary>Skipped</summary>\n\n- `x/y.go`\n</details>\n",
		"```go\nx := a / b\n```\n",
	} {
		if got := GitLab(s); got != s {
			t.Errorf("GitLab(%q) = %q, want it unchanged", s, got)
		}
	}
}

func FuzzGitLab(f *testing.F) {
	for _, s := range []string{"/merge", "@all", "!1 #2 ~x %y &3 $4", "```\n/close\n```", "`a` /b", "a\n/approve\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := GitLab(Text(s, repo))
		if strings.Contains(got, "\n/") || strings.HasPrefix(got, "/") {
			// only inside a fence may a line start with a slash, and
			// GitLab indents none: prove it is in one
			for _, l := range gitlabLive(t, got) {
				if strings.HasPrefix(l, "quick action") {
					t.Fatalf("quick action live in %q: %s", got, l)
				}
			}
		}
		if again := GitLab(got); again != got {
			t.Fatalf("not idempotent on %q", s)
		}
	})
}

// TestGitLabCheckerCatches: the checker above sees what GitHub's escaping
// alone leaves live on GitLab, so its silence means something.
func TestGitLabCheckerCatches(t *testing.T) {
	for _, s := range []string{"/merge", "!34", "~bug", "%v1", "&7", "$42", "@_ab"} {
		if live := gitlabLive(t, Text(s, repo)); len(live) == 0 {
			t.Errorf("checker missed %q in %q", s, Text(s, repo))
		}
	}
}

func ExampleGitLab() {
	fmt.Print(GitLab(Text("Looks good.\n/merge\ncc @all, see !12 and ~bug", "")))
	// Output:
	// Looks good.
	// \/merge
	// cc `@all`, see `!12` and `~bug`
}
