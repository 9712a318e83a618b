package review

import (
	"strconv"
	"testing"

	"github.com/prq-dev/prq/diff"
)

func TestParseReplacement(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     *string
		ignored  bool
	}{
		{"omitted: a model that does not know the field", `{"summary":"s","comments":[{"line":2,"body":"b"}]}`, nil, false},
		{"null", `{"summary":"s","comments":[{"line":2,"body":"b","replacement":null}]}`, nil, false},
		{"text", `{"summary":"s","comments":[{"line":2,"body":"b","replacement":"x := 1\ny := 2"}]}`, ptr("x := 1\ny := 2"), false},
		{"empty text deletes the lines", `{"summary":"s","comments":[{"line":2,"body":"b","replacement":""}]}`, ptr(""), false},
		{"not text: ignored, the finding kept", `{"summary":"s","comments":[{"line":2,"body":"b","replacement":["x"]}]}`, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Parse(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			got := r.Comments[0].Replacement
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Fatalf("replacement %v, want %v", show(got), show(tc.want))
			}
			if ig := len(r.Ignored) == 1 && r.Ignored[0] == "comments[].replacement"; ig != tc.ignored {
				t.Fatalf("ignored %v, want the field named: %v", r.Ignored, tc.ignored)
			}
		})
	}
}

func TestPlaceSuggestions(t *testing.T) {
	// head lines 10..13 (11, 12 added), base line 11 deleted; a second hunk at 41..42
	d, err := diff.Parse("@@ -10,3 +10,4 @@\n a\n-b\n+c\n+d\n e\n@@ -40,2 +41,2 @@\n x\n-y\n+z")
	if err != nil {
		t.Fatal(err)
	}
	ip := func(n int) *int { return &n }
	for _, tc := range []struct {
		name  string
		f     Finding
		lines []string
		want  *string // the suggestion
	}{
		{"one head line", Finding{Line: 11, Side: "RIGHT", Replacement: ptr("c2")}, []string{"c"}, ptr("c2")},
		{"a range in one hunk, context included", Finding{Line: 13, StartLine: ip(10), Side: "RIGHT", Replacement: ptr("a\nc\nd2\ne\n")}, []string{"a", "c", "d", "e"}, ptr("a\nc\nd2\ne")},
		{"deleting the lines", Finding{Line: 12, StartLine: ip(11), Side: "RIGHT", Replacement: ptr("")}, []string{"c", "d"}, ptr("")},
		{"no change: prose", Finding{Line: 12, Side: "RIGHT", Replacement: ptr("d\n")}, []string{"d"}, nil},
		{"the deleted side: prose", Finding{Line: 11, Side: "LEFT", Replacement: ptr("b2")}, []string{"b"}, nil},
		{"moved off the line named: prose", Finding{Line: 15, Side: "RIGHT", Replacement: ptr("f")}, []string{"e"}, nil},
		{"a range across hunks, cut to its last line: prose (the text replaces four lines, not one)", Finding{Line: 42, StartLine: ip(12), Side: "RIGHT", Replacement: ptr("d\ne\nx\nz2")}, []string{"z"}, nil},
		{"a carriage return: prose", Finding{Line: 11, Side: "RIGHT", Replacement: ptr("c\rd")}, []string{"c"}, nil},
		{"no replacement", Finding{Line: 11, Side: "RIGHT"}, []string{"c"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.f.Body = "b"
			cs, _ := Place(Reply{Comments: []Finding{tc.f}}, d)
			if len(cs) != 1 {
				t.Fatalf("%d comments", len(cs))
			}
			c := cs[0]
			if len(c.Lines) != len(tc.lines) {
				t.Fatalf("lines %q, want %q", c.Lines, tc.lines)
			}
			for i := range c.Lines {
				if c.Lines[i] != tc.lines[i] {
					t.Fatalf("lines %q, want %q", c.Lines, tc.lines)
				}
			}
			if (c.Suggestion == nil) != (tc.want == nil) || (c.Suggestion != nil && *c.Suggestion != *tc.want) {
				t.Fatalf("suggestion %v, want %v", show(c.Suggestion), show(tc.want))
			}
		})
	}
	// two findings on one line: merged, and neither suggestion applies alone
	cs, _ := Place(Reply{Comments: []Finding{{Line: 11, Side: "RIGHT", Body: "x", Replacement: ptr("c2")}, {Line: 11, Side: "RIGHT", Body: "y"}}}, d)
	if len(cs) != 1 || cs[0].Suggestion != nil {
		t.Fatalf("merged: %+v", cs)
	}
}

func TestKey(t *testing.T) {
	base := Key("a.go", diff.Right, []string{"\tx := f()"}, "Does `x := f()` handle the error?")
	for _, tc := range []struct {
		name  string
		key   string
		equal bool
	}{
		{"reworded, the same code named", Key("a.go", diff.Right, []string{"\tx := f()"}, "Check the error handling around `x := f()`, and add a test."), true},
		{"the line moved and re-indented", Key("a.go", diff.Right, []string{"    x := f()  "}, "Does `x := f()` handle the error?"), true},
		{"another file", Key("b.go", diff.Right, []string{"\tx := f()"}, "Does `x := f()` handle the error?"), false},
		{"the line changed", Key("a.go", diff.Right, []string{"\tx := g()"}, "Does `x := f()` handle the error?"), false},
		{"another problem on the line", Key("a.go", diff.Right, []string{"\tx := f()"}, "`x` shadows the outer `x`."), false},
		{"the deleted side", Key("a.go", diff.Left, []string{"\tx := f()"}, "Does `x := f()` handle the error?"), false},
	} {
		if got := tc.key == base; got != tc.equal {
			t.Errorf("%s: same key %v, want %v", tc.name, got, tc.equal)
		}
	}
	// a body without code spans: its words, numbers left out
	if Key("a.go", diff.Right, []string{"x"}, "(about line 12) the error is dropped") != Key("a.go", diff.Right, []string{"x"}, "(about line 19) The error is dropped.") {
		t.Error("a moved finding's line number changes its key")
	}
}

func ptr(s string) *string { return &s }

func show(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return strconv.Quote(*s)
}
