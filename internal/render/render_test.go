package render

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func marker(i int) string { return fmt.Sprintf("<!-- prq:summary:%d -->", i) }

func files(n, textLen int) []File {
	var fs []File
	for i := 0; i < n; i++ {
		f := File{Path: fmt.Sprintf("pkg/dir%03d/file_%04d.go", i%50, i), Summary: strings.Repeat("word ", textLen/5), Reviewed: i%2 == 0, Comments: i % 3}
		switch i % 10 {
		case 7:
			f.Summary, f.Note = "", "excluded by pattern *.go (generated)"
		case 9:
			f.Summary, f.Failed, f.Note = "", true, "the model's reply could not be read"
		}
		fs = append(fs, f)
	}
	return fs
}

func TestSummaryFitsWhateverTheSize(t *testing.T) {
	for _, tc := range []struct {
		name          string
		n, text       int
		wantParts     int // 0: more than one
		wantCollapsed bool
	}{
		{"small", 3, 200, 1, false},
		{"corpus-sized", 70, 300, 1, false},
		{"collapsed", 120, 1000, 1, true},
		{"continued", 3000, 300, 0, true},
		{"huge texts", 200, 20000, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Summary{Repo: "acme/w", Head: strings.Repeat("a", 40), Files: files(tc.n, tc.text), Marker: marker, State: "<!-- prq:reviewed=abc -->"}
			parts := s.Parts(0)
			if tc.wantParts > 0 && len(parts) != tc.wantParts {
				t.Fatalf("%d parts, want %d", len(parts), tc.wantParts)
			}
			if tc.wantParts == 0 && len(parts) < 2 {
				t.Fatalf("%d parts, want it continued", len(parts))
			}
			all := strings.Join(parts, "\n")
			for i, p := range parts {
				if n := utf8.RuneCountInString(p); n > MaxBody {
					t.Errorf("part %d: %d characters, over GitHub's %d", i+1, n, MaxBody)
				}
				if !strings.Contains(p, marker(i+1)) {
					t.Errorf("part %d lacks its marker", i+1)
				}
				if strings.Count(p, "<details>") != strings.Count(p, "</details>") {
					t.Errorf("part %d: unbalanced <details>", i+1)
				}
			}
			if !strings.Contains(parts[0], "<!-- prq:reviewed=abc -->") {
				t.Error("part 1 lacks the state line")
			}
			if got := strings.Contains(parts[0], "<details><summary>Per-file"); got != tc.wantCollapsed {
				t.Errorf("collapsed = %v, want %v", got, tc.wantCollapsed)
			}
			for _, f := range s.Files {
				if !strings.Contains(all, f.Path) {
					t.Fatalf("file %s is in no part", f.Path)
				}
			}
		})
	}
}

func TestSummaryRendersUntrustedTextInert(t *testing.T) {
	s := Summary{Repo: "acme/w", Head: "abc", Marker: marker, Files: []File{
		{Path: "a|b`c.go", Summary: "cc @acme/team ![x](https://e.example/i.png) <!-- prq:summary:1 --> | col", Reviewed: true},
		{Path: "<img src=x>.go", Note: "skipped: <b>bold</b> @octocat"},
	}}
	body := s.Parts(0)[0]
	if !strings.Contains(body, "- `<img src=x>.go`:") {
		t.Errorf("a path is shown as code:\n%s", body)
	}
	for _, bad := range []string{"@acme/team ", "![x]", "<b>", " @octocat"} {
		if strings.Contains(body, bad) {
			t.Errorf("body holds %q live:\n%s", bad, body)
		}
	}
	if strings.Count(body, "<!-- prq:summary:1 -->") != 1 {
		t.Errorf("a copied marker survived:\n%s", body)
	}
	// the table keeps three columns on every row
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "| `") || strings.HasPrefix(line, "| ``") {
			if n := strings.Count(line, " | ") + 2; n != 4 {
				t.Errorf("row with %d cells: %s", n-1, line)
			}
		}
	}
}

func TestReviewBody(t *testing.T) {
	clean := Review{Repo: "acme/w", Head: "abcdef0123", Files: 4, Marker: "<!-- prq:review -->"}.Body(0)
	if !strings.Contains(clean, "no problems found") || !strings.Contains(clean, "<!-- prq:review -->") {
		t.Errorf("clean review: %q", clean)
	}
	// files whose review failed are never reported as clean
	failed := Review{Repo: "acme/w", Head: "abcdef0123", Failed: 3, Marker: "<!-- prq:review -->"}.Body(0)
	if strings.Contains(failed, "no problems found") || !strings.Contains(failed, "could not review the 3 files") {
		t.Errorf("a review whose files all failed: %q", failed)
	}
	some := Review{Repo: "acme/w", Head: "abcdef0123", Files: 2, Failed: 1, Marker: "<!-- prq:review -->"}.Body(0)
	if !strings.Contains(some, "reviewed 2 files") || !strings.Contains(some, "**1 file could not be reviewed**") {
		t.Errorf("a review with one file failed: %q", some)
	}
	var fs []Finding
	for i := 0; i < 2000; i++ {
		fs = append(fs, Finding{Path: fmt.Sprintf("f%d.go", i/10), Line: i, Body: strings.Repeat("x", 100) + " @octocat"})
	}
	big := Review{Repo: "acme/w", Head: "abc", Files: 200, Comments: 3, Findings: fs, Marker: "<!-- prq:review -->"}.Body(0)
	if n := utf8.RuneCountInString(big); n > MaxBody {
		t.Fatalf("%d characters", n)
	}
	if !strings.Contains(big, "more findings did not fit") || !strings.HasSuffix(strings.TrimSpace(big), "<!-- prq:review -->") {
		t.Errorf("a cut review body says so and keeps its marker")
	}
	if strings.Contains(big, " @octocat") {
		t.Error("a live mention in the review body")
	}
}

func TestSummaryNotice(t *testing.T) {
	s := Summary{Repo: "acme/w", Head: "abc", Marker: marker, Files: files(2, 10),
		Notice: "acme/w:.prq.yaml at abc1234 line 3: reviews.draft: unknown setting; known here: auto, drafts. Applied instead: defaults. cc @octocat"}
	body := s.Parts(0)[0]
	if !strings.Contains(body, "> [!WARNING]\n> acme/w:.prq.yaml at abc1234 line 3: reviews.draft: unknown setting") {
		t.Errorf("the notice sits under the headline as a warning:\n%s", body)
	}
	if strings.Contains(body, " @octocat") {
		t.Errorf("the notice is rendered inert:\n%s", body)
	}
	if strings.Contains(Summary{Repo: "acme/w", Head: "abc", Files: files(1, 10)}.Parts(0)[0], "[!WARNING]") {
		t.Errorf("no notice, no warning")
	}
}

// TestSummaryCost: a summary with a cost says it in part 1's footer;
// without one, nothing.
func TestSummaryCost(t *testing.T) {
	s := Summary{Repo: "o/r", Head: "abc1234", Files: []File{{Path: "a.go", Summary: "Adds a."}}}
	if body := s.Parts(0)[0]; strings.Contains(body, "cost") {
		t.Errorf("no cost, yet:\n%s", body)
	}
	s.Cost = 0.01234
	if body := s.Parts(0)[0]; !strings.Contains(body, "<sub>The calls of this review cost $0.0123 at the models' prices.</sub>") {
		t.Errorf("the footer lacks the cost:\n%s", body)
	}
	if Dollars(12.345) != "$12.35" || Dollars(0.00001) != "$0.0000" {
		t.Errorf("Dollars: %s %s", Dollars(12.345), Dollars(0.00001))
	}
}

// TestCountsAgreeWithTheirNumber: one file, one line comment, one
// finding read in the singular; other counts in the plural.
func TestCountsAgreeWithTheirNumber(t *testing.T) {
	one := Review{Repo: "acme/w", Head: "abcdef0123", Files: 1, Comments: 1, Findings: []Finding{{Path: "a.go", Body: "x"}}, Marker: "<!-- m -->"}.Body(0)
	if want := "prq reviewed 1 file at `abcdef0`: 1 line comment and 1 finding below."; !strings.Contains(one, want) {
		t.Errorf("review of one file:\n%s\nwant %q", one, want)
	}
	failed := Review{Repo: "acme/w", Head: "abcdef0123", Failed: 1, Marker: "<!-- m -->"}.Body(0)
	if want := "prq could not review the 1 file at"; !strings.Contains(failed, want) {
		t.Errorf("review of one failed file:\n%s\nwant %q", failed, want)
	}
	two := Review{Repo: "acme/w", Head: "abcdef0123", Files: 2, Comments: 0, Findings: []Finding{{Path: "a.go", Body: "x"}, {Path: "b.go", Body: "y"}}, Marker: "<!-- m -->"}.Body(0)
	if want := "prq reviewed 2 files at `abcdef0`: 0 line comments and 2 findings below."; !strings.Contains(two, want) {
		t.Errorf("review of two files:\n%s\nwant %q", two, want)
	}
	sum := Summary{Repo: "acme/w", Head: "abcdef0123", Files: []File{{Path: "a.go", Summary: "adds a", Reviewed: true, Comments: 1}}}.Parts(0)
	if want := "1 file at `abcdef0`; reviewed 1 with 1 line comment."; !strings.Contains(sum[0], want) {
		t.Errorf("summary of one file:\n%s\nwant %q", sum[0], want)
	}
	if !strings.Contains(sum[0], "| 1 comment |") {
		t.Errorf("summary row of a file with one comment:\n%s", sum[0])
	}
	for n, want := range map[int]string{0: "0 files", 1: "1 file", 2: "2 files"} {
		if got := Count(n, "file"); got != want {
			t.Errorf("Count(%d, file) = %q, want %q", n, got, want)
		}
	}
}

// TestSummaryWalkthrough: a walkthrough opens part 1, under the
// headline and before the rows, inert and cut at WalkthroughCap; a
// summary split over parts carries it in part 1 alone.
func TestSummaryWalkthrough(t *testing.T) {
	w := "This pull request changes 2 files.\n\n- **parser**: `a.go` cc @octocat <img src=x>\n\n```\nunclosed fence"
	body := Summary{Repo: "acme/w", Head: "abc", Marker: marker, Files: files(2, 10), Walkthrough: w}.Parts(0)[0]
	head, rest, ok := strings.Cut(body, "### Walkthrough\n\nThis pull request changes 2 files.")
	if !ok || !strings.Contains(head, "2 files at") || !strings.Contains(rest, "| File |") {
		t.Fatalf("the walkthrough does not sit under the headline, before the rows:\n%s", body)
	}
	if strings.Contains(body, " @octocat") || strings.Contains(body, "<img") || strings.Count(body, "```") != 2 {
		t.Errorf("the walkthrough is not inert (or its fence not closed):\n%s", body)
	}
	long := Summary{Repo: "acme/w", Head: "abc", Marker: marker, Files: files(1, 10), Walkthrough: strings.Repeat("é", 2*WalkthroughCap)}.Parts(0)[0]
	if n := strings.Count(long, "é"); n != WalkthroughCap || !strings.Contains(long, "… (cut short)") {
		t.Errorf("a long walkthrough keeps %d characters, want %d and a note", n, WalkthroughCap)
	}
	parts := Summary{Repo: "acme/w", Head: "abc", Marker: marker, Files: files(400, 2000), Walkthrough: w}.Parts(0)
	if len(parts) < 2 || !strings.Contains(parts[0], "### Walkthrough") {
		t.Fatalf("%d parts; the first lacks the walkthrough", len(parts))
	}
	for i, p := range parts[1:] {
		if strings.Contains(p, "### Walkthrough") {
			t.Errorf("part %d repeats the walkthrough", i+2)
		}
	}
	if strings.Contains(Summary{Repo: "acme/w", Head: "abc", Files: files(1, 10)}.Parts(0)[0], "Walkthrough") {
		t.Errorf("no walkthrough, no section")
	}
}
