// Package lualayout checks the layout of Lua scripts assembled by
// concatenation (ratelimit's library, admission's operations): each
// file's header names the locals it takes from the files before it
// ("-- Uses: a, b") and, when other files follow it, those it gives
// them ("-- Defines: c, d"), continued on lines that start "--   ";
// entries in parentheses are comments. Check compares both with the
// code, so the locals files share are explicit and stay so.
//
// It owns the parsing of headers and of top-level locals (a scanner, not
// a Lua parser: it drops comments and strings and reads identifiers).
package lualayout

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// File is one file of a script, in concatenation order.
type File struct{ Name, Src string }

// Strip drops comments and string literals, leaving the code.
func Strip(src string) string {
	var b strings.Builder
	for i := 0; i < len(src); i++ {
		switch c := src[i]; {
		case c == '-' && strings.HasPrefix(src[i:], "--"):
			for i < len(src) && src[i] != '\n' {
				i++
			}
			b.WriteByte('\n')
		case c == '\'' || c == '"':
			for i++; i < len(src) && src[i] != c; i++ {
				if src[i] == '\\' {
					i++
				}
			}
			b.WriteString(`""`)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

var (
	topLocal  = regexp.MustCompile(`(?m)^local (?:function )?([A-Za-z_][\w, ]*?)\s*(?:=|\(|$)`)
	ident     = regexp.MustCompile(`[A-Za-z_]\w*`)
	headerSet = regexp.MustCompile(`^-- (Uses|Defines): ?(.*)$`)
)

// Declares returns the locals src declares at its top level.
func Declares(src string) []string {
	var out []string
	for _, m := range topLocal.FindAllStringSubmatch(Strip(src), -1) {
		for n := range strings.SplitSeq(m[1], ",") {
			out = append(out, strings.TrimSpace(n))
		}
	}
	return out
}

// uses returns the names in given that src uses and does not declare
// at its top level, sorted.
func uses(src string, given map[string]bool) []string {
	own := map[string]bool{}
	for _, n := range Declares(src) {
		own[n] = true
	}
	code := Strip(src)
	seen := map[string]bool{}
	for _, ix := range ident.FindAllStringIndex(code, -1) {
		if ix[0] > 0 && (code[ix[0]-1] == '.' || code[ix[0]-1] == ':') {
			continue // a field
		}
		if n := code[ix[0]:ix[1]]; given[n] && !own[n] {
			seen[n] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Header returns a file's "Uses:" and "Defines:" lists, read from its
// leading comment block; ok is false without a "Uses:".
func Header(src string) (uses, defines []string, ok bool) {
	lists := map[string]*[]string{"Uses": &uses, "Defines": &defines}
	var cur *[]string
	for l := range strings.SplitSeq(src, "\n") {
		if !strings.HasPrefix(l, "--") {
			break
		}
		if m := headerSet.FindStringSubmatch(l); m != nil {
			ok = ok || m[1] == "Uses"
			cur = lists[m[1]]
			l = m[2]
		} else if cur == nil || !strings.HasPrefix(l, "--   ") {
			cur = nil
			continue
		} else {
			l = strings.TrimPrefix(l, "--")
		}
		for n := range strings.SplitSeq(l, ",") {
			if n = strings.TrimSpace(n); n != "" && !strings.HasPrefix(n, "(") {
				*cur = append(*cur, n)
			}
		}
	}
	slices.Sort(uses)
	return uses, defines, ok
}

// Check reads files in order, each on top of the ones before, with
// builtins given by whoever assembles them, and returns what disagrees:
// a file whose "Uses:" is not exactly the locals of earlier files it
// uses, a use of a local its file does not give ("Defines:"), and a
// "Defines:" of a local its file does not declare.
func Check(files []File, builtins ...string) []string {
	var problems []string
	given, exported := map[string]bool{}, map[string]bool{}
	for _, n := range builtins {
		given[n], exported[n] = true, true
	}
	for _, f := range files {
		want, defines, ok := Header(f.Src)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: no Uses: in its header", f.Name))
		}
		got := uses(f.Src, given)
		if !slices.Equal(got, want) {
			problems = append(problems, fmt.Sprintf("%s uses %q of the files before it, its header says %q", f.Name, got, want))
		}
		for _, n := range got {
			if !exported[n] {
				problems = append(problems, fmt.Sprintf("%s uses %s, which the file declaring it keeps to itself (no Defines:)", f.Name, n))
			}
		}
		own := Declares(f.Src)
		for _, n := range defines {
			if !slices.Contains(own, n) {
				problems = append(problems, fmt.Sprintf("%s's header Defines: %s, which it does not declare", f.Name, n))
			}
			exported[n] = true
		}
		for _, n := range own {
			given[n] = true
		}
	}
	return problems
}
