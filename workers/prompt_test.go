package workers

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
)

const patch = "@@ -10,3 +10,4 @@ func f() {\n a\n-b\n+c\n+d\n e\n@@ -40 +41 @@\n-x\n+y"

func TestParseReview(t *testing.T) {
	f := store.FileData{Path: "x.go", Patch: patch}
	sum, cs, err := parseReview("Here you go:\n```json\n{\"summary\":\"ok\",\"comments\":[{\"line\":11,\"body\":\"check c\"},{\"line\":30,\"body\":\"far away\"},{\"line\":11,\"body\":\"dup line\"},{\"line\":12,\"body\":\"  \"}]}\n```", f)
	if err != nil || sum != "ok" {
		t.Fatal(sum, err)
	}
	if len(cs) != 2 || cs[0].Line != 11 || cs[1].Line != 41 || !strings.Contains(cs[1].Body, "(about line 30)") {
		t.Fatalf("comments %+v: want line 11 kept, line 30 moved to the nearest diff line 41, duplicates and blanks dropped", cs)
	}
	if _, _, err := parseReview("I think it's fine.", f); err == nil {
		t.Fatal("prose accepted as a review")
	}
}

func TestExcluded(t *testing.T) {
	globs := []string{"*.lock", "go.sum", "vendor/**", "*.pb.go", "docs/*.md"}
	for path, want := range map[string]bool{
		"yarn.lock": true, "a/b/Cargo.lock": true, "go.sum": true, "sub/go.sum": true, "vendor/x/y.go": true,
		"pkg/vendor/x.go": true, "api/v1/x.pb.go": true, "docs/a.md": true, "docs/sub/a.md": false, "main.go": false, "vendorx/a.go": false,
	} {
		if _, got := excluded(path, globs); got != want {
			t.Errorf("excluded(%s) = %v, want %v", path, got, want)
		}
	}
}

func TestFilePromptFitsTheModel(t *testing.T) {
	tok, _ := ratelimit.NewTokenizer("gpt-4o")
	var b strings.Builder
	for i := 0; i < 40; i++ {
		b.WriteString("@@ -" + itoa(i*20+1) + ",1 +" + itoa(i*20+1) + ",2 @@\n-old line number " + itoa(i) + "\n+new line with some words " + itoa(i) + "\n+another added line " + itoa(i) + "\n")
	}
	f := store.FileData{Path: "big.go", Status: "modified", Patch: strings.TrimSuffix(b.String(), "\n")}
	small := Model{Name: "gpt-4o", MaxOutput: 100, ContextTokens: 900}
	p, err := buildFilePrompt(jobs.KindReview, "PR", f, small, tok)
	if err != nil {
		t.Fatal(err)
	}
	if p.truncated == 0 || p.input > small.ContextTokens-small.MaxOutput || !strings.Contains(p.user, "more hunks were left out") {
		t.Fatalf("not cut to fit: %d tokens, %d hunks left out", p.input, p.truncated)
	}
	if p.estimate <= p.input/2 {
		t.Fatalf("estimate %d looks wrong for %d input tokens", p.estimate, p.input)
	}
	tiny := Model{Name: "gpt-4o", MaxOutput: 100, ContextTokens: 150}
	if _, err := buildFilePrompt(jobs.KindReview, "PR", f, tiny, tok); err != errTooLarge {
		t.Fatalf("a file that cannot fit: %v", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestSummaryComment(t *testing.T) {
	run := store.Run{Head: "bbbbbbb", LastReviewed: "aaaaaaa", ReviewTotal: 1}
	files := map[int]store.FileData{
		0: {Path: "a.go", Index: 0},
		1: {Path: "go.sum", Index: 1, SkipReason: "excluded by go.sum"},
		2: {Path: "b.go", Index: 2},
		3: {Path: "c.go", Index: 3},
	}
	results := []store.Result{
		{Kind: jobs.KindSummary, Path: "a.go", Text: "Adds a | pipe."},
		{Kind: jobs.KindSummary, Path: "b.go", Skipped: "skipped: quota reached, resets at 2026-12-01 00:00 UTC"},
		{Kind: jobs.KindReview, Path: "a.go", Comments: []store.Comment{{Line: 1}}},
	}
	prev := []store.Result{{Kind: jobs.KindSummary, Path: "c.go", Text: "Kept from the last push."}}
	body := summaryComment(run, files, results, prev)
	for _, want := range []string{SummaryMarker, "prq:reviewed=aaaaaaa,bbbbbbb", "Adds a \\| pipe.", "Kept from the last push.", "`go.sum`: excluded by go.sum",
		"**Quota:**", "resets at 2026-12-01", "1 line comments"} {
		if !strings.Contains(body, want) {
			t.Errorf("summary lacks %q:\n%s", want, body)
		}
	}
}
