package diff_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prq-dev/prq/diff"
)

func TestParseHeaders(t *testing.T) {
	tests := []struct {
		name                   string
		patch                  string
		oldS, oldN, newS, newN int
		lines                  int
	}{
		{"full counts", "@@ -1,3 +1,4 @@ func x\n a\n-b\n+c\n+d\n e", 1, 3, 1, 4, 5},
		{"omitted counts", "@@ -5 +5 @@\n-x\n+y", 5, 1, 5, 1, 2},
		{"omitted old count", "@@ -5 +5,2 @@\n-x\n+y\n+z", 5, 1, 5, 2, 3},
		{"new file", "@@ -0,0 +1,2 @@\n+a\n+b", 0, 0, 1, 2, 2},
		{"deleted file", "@@ -1,2 +0,0 @@\n-a\n-b", 1, 2, 0, 0, 2},
		{"no newline marker", "@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n\\ No newline at end of file", 1, 1, 1, 1, 2},
		{"empty context line", "@@ -1,2 +1,2 @@\n\n-a\n+b", 1, 2, 1, 2, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := diff.Parse(tt.patch)
			if err != nil {
				t.Fatal(err)
			}
			h := p.Hunks[0]
			if h.OldStart != tt.oldS || h.OldLines != tt.oldN || h.NewStart != tt.newS || h.NewLines != tt.newN || len(h.Lines) != tt.lines {
				t.Fatalf("got %+v", h)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for name, patch := range map[string]string{
		"content first":   "+a\n@@ -1 +1 @@",
		"bad header":      "@@ -x +1 @@\n+a",
		"no closing":      "@@ -1 +1\n+a",
		"too many added":  "@@ -1,0 +1,1 @@\n+a\n+b",
		"unknown prefix":  "@@ -1 +1 @@\n*a",
		"negative number": "@@ --1 +1 @@\n a",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := diff.Parse(patch)
			var pe *diff.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("want ParseError, got %v", err)
			}
		})
	}
}

func TestLines(t *testing.T) {
	p, err := diff.Parse("@@ -10,3 +10,4 @@\n a\n-b\n+c\n+d\n e\n@@ -40 +41 @@\n-x\n+y")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		side diff.Side
		line int
		want bool
	}{{diff.Right, 10, true}, {diff.Right, 11, true}, {diff.Right, 13, true}, {diff.Right, 14, false},
		{diff.Left, 11, true}, {diff.Left, 12, true}, {diff.Right, 41, true}, {diff.Left, 40, true}, {diff.Right, 30, false}, {diff.Right, 0, false}} {
		if got := p.Has(c.side, c.line); got != c.want {
			t.Errorf("Has(%s, %d) = %v, want %v", c.side, c.line, got, c.want)
		}
	}
	if n, ok := p.Nearest(diff.Right, 30); !ok || n != 41 {
		t.Errorf("Nearest(30) = %d", n)
	}
	if got := p.Added(); len(got) != 3 || got[0] != 11 || got[2] != 41 {
		t.Errorf("Added = %v", got)
	}
	if a := p.Annotate(); !strings.Contains(a, "  11 +c") || !strings.Contains(a, " L11 -b") {
		t.Errorf("Annotate:\n%s", a)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("@@ -1,3 +1,4 @@ func x\n a\n-b\n+c\n+d\n e")
	f.Add("@@ -5 +5 @@\n-x\n+y")
	f.Add("@@ -0,0 +1 @@\n+a\n\\ No newline at end of file")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := diff.Parse(s)
		if err != nil {
			return
		}
		for _, h := range p.Hunks {
			for _, l := range h.Lines {
				if l.Op == '+' && !p.Has(diff.Right, l.New) && l.New > 0 {
					t.Fatalf("added line %d not commentable", l.New)
				}
			}
		}
		_ = p.Annotate()
	})
}

func TestSplit(t *testing.T) {
	var b strings.Builder
	b.WriteString("@@ -1,2 +1,2 @@\n a\n-b\n+B\n@@ -100,2 +100,41 @@\n x\n")
	for i := 0; i < 39; i++ {
		fmt.Fprintf(&b, "+line %d\n", i)
	}
	b.WriteString(" y\n@@ -300 +339 @@\n-p\n+q")
	p, err := diff.Parse(b.String())
	if err != nil {
		t.Fatal(err)
	}
	lines := func(q *diff.Patch) int {
		n := 0
		for _, h := range q.Hunks {
			n += len(h.Lines)
		}
		return n
	}
	for _, budget := range []int{1000, 50, 12, 5, 1} {
		parts := p.Split(func(q *diff.Patch) bool { return lines(q) <= budget })
		seen := map[string]bool{}
		for _, part := range parts {
			if lines(part) > budget && lines(part) > 1 {
				t.Errorf("budget %d: a part of %d lines", budget, lines(part))
			}
			for _, h := range part.Hunks {
				for _, l := range h.Lines {
					// every line keeps its real numbers: commentable where it was
					if l.Op != '-' && !p.Has(diff.Right, l.New) {
						t.Errorf("budget %d: line %+v lost its number", budget, l)
					}
					seen[fmt.Sprint(l.Op, l.Old, l.New)] = true
				}
				// headers agree with the lines they hold
				olds, news := 0, 0
				for _, l := range h.Lines {
					if l.Op != '+' {
						olds++
					}
					if l.Op != '-' {
						news++
					}
				}
				if h.OldLines != olds || h.NewLines != news || (h.Lines[0].Op != '-' && h.Lines[0].New != h.NewStart) {
					t.Errorf("budget %d: header %d,%d %d,%d for %d old and %d new lines from %+v", budget, h.OldStart, h.OldLines, h.NewStart, h.NewLines, olds, news, h.Lines[0])
				}
			}
		}
		for _, h := range p.Hunks {
			for _, l := range h.Lines {
				if !seen[fmt.Sprint(l.Op, l.Old, l.New)] {
					t.Errorf("budget %d: line %+v in no part", budget, l)
				}
			}
		}
		if budget == 1000 && len(parts) != 1 {
			t.Errorf("a patch that fits was split into %d", len(parts))
		}
		if budget == 12 && len(parts) < 5 {
			t.Errorf("budget 12: %d parts, want the 41-line hunk cut", len(parts))
		}
	}
}
