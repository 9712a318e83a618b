package config

import (
	"fmt"
	"log/slog"
	"strings"
)

// UsageError is a command-line mistake (a bad flag or argument): the
// command exits with code 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// ParseLevel parses a log level: debug, info, warn or error.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%q: want debug, info, warn or error", s)
	}
	return l, nil
}

// SplitList splits a comma-separated flag value, dropping empty items.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Nearest returns the candidate closest to s by edit distance, when it
// is close enough to be the likely intent of a typo ("" otherwise).
func Nearest(s string, candidates []string) string {
	best, bestD := "", 0
	for _, c := range candidates {
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		if best == "" || d < bestD || d == bestD && c < best {
			best, bestD = c, d
		}
	}
	// a third of the longer name, at least 1 and at most 3 edits
	limit := min(max(1, max(len(s), len(best))/3), 3)
	if best == "" || bestD > limit {
		return ""
	}
	return best
}

// editDistance is the optimal-string-alignment distance between a and
// b, in bytes: insertions, deletions, substitutions and transpositions
// of neighbours (nmae -> name) cost 1 each.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
