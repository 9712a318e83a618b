package render

import (
	"strings"
)

// Suggestion renders a committable suggestion: GitHub replaces the lines
// the comment sits on with text when the author commits it. text is the
// model's (untrusted) but needs no escaping: nothing inside a fenced code
// block is live. What it must not do is end the block early, so the fence
// is longer than any run of backticks in it (CommonMark closes a fence
// only with one at least as long), and invisible and control characters
// are dropped (they would be committed into the file).
func Suggestion(text string) string {
	text = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case r < 0x20 || (r >= 0x7f && r < 0xa0), r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			return -1
		}
		return r
	}, strings.ToValidUTF8(text, "\uFFFD"))
	fence := strings.Repeat("`", max(3, longestRun(text, '`')+1))
	if text == "" {
		// an empty suggestion deletes the lines
		return fence + "suggestion\n" + fence + "\n"
	}
	return fence + "suggestion\n" + text + "\n" + fence + "\n"
}

// longestRun is the length of the longest run of c in s.
func longestRun(s string, c byte) int {
	best, n := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] != c {
			n = 0
			continue
		}
		n++
		best = max(best, n)
	}
	return best
}
