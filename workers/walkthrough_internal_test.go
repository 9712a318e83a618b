package workers

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
)

// TestWalkthroughPromptFits: the walkthrough lists every file and
// carries the reviewed files' patches, cut until the prompt fits the
// model; a model too small for even the list refuses it as too large.
func TestWalkthroughPromptFits(t *testing.T) {
	tok, _ := ratelimit.NewTokenizer("gpt-4o")
	var files []store.FileData
	for i := range 4 {
		var p strings.Builder
		p.WriteString("@@ -0,0 +1,400 @@\n")
		for k := range 400 {
			fmt.Fprintf(&p, "+func f%d_%d() int { return %d }\n", i, k, k)
		}
		files = append(files, store.FileData{Path: fmt.Sprintf("pkg/f%d.go", i), Status: "added", Additions: 400, Patch: p.String(), Index: i})
	}
	files = append(files, store.FileData{Path: "go.sum", Status: "modified", Patch: "@@ -1 +1 @@\n-a\n+b", SkipReason: "excluded by go.sum", Index: 4})
	pc := contextOf("Add f", "")
	big, err := walkthroughPrompt(pc, files, Model{Model: llmcall.Model{Name: "gpt-4o", MaxOutput: 500, ContextTokens: 128000}}, tok)
	if err != nil {
		t.Fatal(err)
	}
	small, err := walkthroughPrompt(pc, files, Model{Model: llmcall.Model{Name: "gpt-4o", MaxOutput: 500, ContextTokens: 3000}}, tok)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]prompt{"big": big, "small": small} {
		if !strings.HasPrefix(p.user, taskWalkthrough) || !strings.Contains(p.user, "- go.sum (modified, +0 -0): excluded by go.sum") ||
			strings.Contains(p.user, "File: go.sum") || !strings.Contains(p.user, "File: pkg/f3.go (added, +400 -0)") {
			t.Errorf("%s: the prompt does not list every file and carry the reviewed ones' patches:\n%.600s", name, p.user)
		}
	}
	if small.input >= big.input || small.input > 3000-500-64 || !strings.Contains(small.user, "(the rest of this file's patch was left out)") {
		t.Errorf("the small model's prompt (%d tokens, big %d) is not cut to fit", small.input, big.input)
	}
	if _, err := walkthroughPrompt(pc, files, Model{Model: llmcall.Model{Name: "gpt-4o", MaxOutput: 500, ContextTokens: 600}}, tok); !errors.Is(err, errTooLarge) {
		t.Errorf("a model too small for the list: %v, want errTooLarge", err)
	}
}

// TestWantsWalkthrough: more than one reviewed file (those unchanged
// since the last review count), at least one summary job, and not off.
func TestWantsWalkthrough(t *testing.T) {
	two := []store.FileData{{Path: "a.go"}, {Path: "b.go", SkipReason: "unchanged since abc1234"}}
	oneReviewed := []store.FileData{{Path: "a.go"}, {Path: "go.sum", SkipReason: "excluded by go.sum"}}
	for _, tc := range []struct {
		name      string
		on        bool
		data      []store.FileData
		summaries int
		want      bool
	}{
		{"two files", true, two, 1, true},
		{"off", false, two, 1, false},
		{"no summary job", true, two, 0, false},
		{"one reviewed file", true, oneReviewed, 1, false},
	} {
		if got := wantsWalkthrough(tc.on, tc.data, tc.summaries); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
