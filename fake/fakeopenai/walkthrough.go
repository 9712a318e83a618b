package fakeopenai

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// listedFile is a line of a walkthrough prompt's file list:
// "- path (status, +added -deleted)".
var listedFile = regexp.MustCompile(`(?m)^- (\S+) \((\w+), \+(\d+) -(\d+)\)`)

// walkthrough answers a walkthrough prompt deterministically: one bullet
// per theme — tests, documentation, or a file's top directory — naming
// its files and their added and deleted lines, themes in the order of
// their first file.
func walkthrough(user string) string {
	type theme struct {
		name          string
		files         []string
		added, delete int
	}
	var themes []*theme
	by := map[string]*theme{}
	for _, m := range listedFile.FindAllStringSubmatch(user, -1) {
		name := themeOf(m[1])
		t := by[name]
		if t == nil {
			t = &theme{name: name}
			by[name] = t
			themes = append(themes, t)
		}
		a, _ := strconv.Atoi(m[3])
		d, _ := strconv.Atoi(m[4])
		t.files = append(t.files, "`"+m[1]+"`")
		t.added += a
		t.delete += d
	}
	if len(themes) == 0 {
		return "This pull request changes no file the walkthrough could read."
	}
	var b strings.Builder
	fmt.Fprintf(&b, "This pull request changes %d files in %d themes.\n", len(listedFile.FindAllString(user, -1)), len(themes))
	for _, t := range themes {
		slices.Sort(t.files)
		fmt.Fprintf(&b, "\n- **%s** (+%d -%d): %s", t.name, t.added, t.delete, strings.Join(t.files, ", "))
	}
	return b.String()
}

// themeOf is the theme a file belongs to in the fake's walkthrough.
func themeOf(path string) string {
	switch {
	case strings.HasSuffix(path, "_test.go") || strings.Contains(path, "/testdata/"):
		return "Tests"
	case strings.HasSuffix(path, ".md") || strings.HasPrefix(path, "docs/"):
		return "Documentation"
	}
	if dir, _, ok := strings.Cut(path, "/"); ok {
		return "`" + dir + "/`"
	}
	return "The repository's root"
}
