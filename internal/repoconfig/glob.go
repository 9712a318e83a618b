package repoconfig

import (
	"fmt"
	"path"
	"strings"
)

// maxGlob is the longest path glob a file may hold.
const maxGlob = 200

// checkGlob reports why a glob cannot be used, or nil.
func checkGlob(g string) error {
	switch {
	case g == "":
		return fmt.Errorf("an empty glob")
	case len(g) > maxGlob:
		return fmt.Errorf("a glob of %d characters, over the limit of %d", len(g), maxGlob)
	case strings.HasPrefix(g, "/"):
		return fmt.Errorf("glob %q starts with /: paths are relative to the repository's root", g)
	}
	for _, seg := range strings.Split(g, "/") {
		if seg == "**" {
			continue
		}
		if strings.Contains(seg, "**") {
			return fmt.Errorf("glob %q: ** must be a whole path segment (a/**/b, **/*.go)", g)
		}
		if _, err := path.Match(seg, "x"); err != nil {
			return fmt.Errorf("glob %q: %v", g, err)
		}
	}
	return nil
}

// Match reports whether a repository path matches a glob: a glob without
// a slash matches the base name (as in .gitignore), one with a slash the
// whole path, segment by segment (*, ? and [...] within a segment as in
// path.Match), ** matching any number of segments, none included
// ("docs/**", "**/*_test.go"). It runs in time linear in the product of
// the glob's and the path's segments, whatever the glob.
func Match(glob, p string) bool {
	if !strings.Contains(glob, "/") {
		ok, _ := path.Match(glob, path.Base(p))
		return ok || glob == "**"
	}
	gs, ps := strings.Split(glob, "/"), strings.Split(p, "/")
	// at[j]: the glob's first i segments match the path's first j
	at := make([]bool, len(ps)+1)
	at[0] = true
	for _, g := range gs {
		next := make([]bool, len(ps)+1)
		if g == "**" {
			seen := false
			for j := range at {
				seen = seen || at[j]
				next[j] = seen
			}
		} else {
			for j := 1; j <= len(ps); j++ {
				if at[j-1] {
					ok, _ := path.Match(g, ps[j-1])
					next[j] = ok
				}
			}
		}
		at = next
	}
	return at[len(ps)]
}

// matchAny returns the first glob p matches.
func matchAny(globs []string, p string) (string, bool) {
	for _, g := range globs {
		if Match(g, p) {
			return g, true
		}
	}
	return "", false
}
