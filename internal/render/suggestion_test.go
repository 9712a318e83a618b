package render

import (
	"strings"
	"testing"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// TestSuggestionStaysInItsBlock: whatever the model's replacement holds
// (fences of its own, markers, HTML, mentions), a GFM renderer reads the
// comment as the prose, then one suggestion block holding exactly the
// replacement, then what prq writes after it.
func TestSuggestionStaysInItsBlock(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"one line", "x := f()", "x := f()"},
		{"lines", "if err != nil {\n\treturn err\n}", "if err != nil {\n\treturn err\n}"},
		{"deleting the lines", "", ""},
		{"a fence inside", "x := 1\n```\n@octocat <!-- prq:summary -->\n```", "x := 1\n```\n@octocat <!-- prq:summary -->\n```"},
		{"a longer fence inside", "````\ny\n`````", "````\ny\n`````"},
		{"tildes", "~~~\nz\n~~~", "~~~\nz\n~~~"},
		{"controls and bidi overrides dropped", "a\u202e := \x00b", "a := b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := "Check the error.\n\n" + Suggestion(tc.in) + "\n<!-- prq:finding key=k tag=t -->\n"
			src := []byte(body)
			doc := goldmark.New(goldmark.WithExtensions(extension.GFM)).Parser().Parse(text.NewReader(src))
			var kinds []string
			var blocks []*ast.FencedCodeBlock
			for n := doc.FirstChild(); n != nil; n = n.NextSibling() {
				kinds = append(kinds, n.Kind().String())
				if b, ok := n.(*ast.FencedCodeBlock); ok {
					blocks = append(blocks, b)
				}
			}
			if strings.Join(kinds, ",") != "Paragraph,FencedCodeBlock,HTMLBlock" || len(blocks) != 1 {
				t.Fatalf("blocks %v, want the prose, one suggestion and the marker:\n%s", kinds, body)
			}
			b := blocks[0]
			if lang := string(b.Language(src)); lang != "suggestion" {
				t.Fatalf("info %q", lang)
			}
			var got strings.Builder
			for i := 0; i < b.Lines().Len(); i++ {
				seg := b.Lines().At(i)
				got.Write(seg.Value(src))
			}
			if want := tc.want; strings.TrimSuffix(got.String(), "\n") != want {
				t.Fatalf("block holds %q, want %q", got.String(), want)
			}
		})
	}
}

func TestReviewBodyStillOpen(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Review
		want []string
	}{
		{"new comments and repeats", Review{Head: "abcdef0123", Files: 2, Comments: 1, StillOpen: 3}, []string{"1 line comment", "3 findings of earlier reviews are still open and are not repeated."}},
		{"only repeats: not a clean review", Review{Head: "abcdef0123", Files: 2, StillOpen: 1}, []string{"no new problems found", "1 finding of an earlier review is still open"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.r.Body(0)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q does not say %q", got, w)
				}
			}
			if strings.Contains(got, "no problems found") {
				t.Errorf("a review with open findings says the head is clean: %q", got)
			}
		})
	}
}
