package repoconfig

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// DefaultGuidelines are the files whose text prompts carry as the
// repository's guidelines, read from the base branch in this order,
// where `guidelines` is not set.
var DefaultGuidelines = []string{"AGENTS.md", "CLAUDE.md", ".github/copilot-instructions.md", ".cursorrules", "CONTRIBUTING.md"}

const (
	// MaxGuidelineFiles is the most files `guidelines` may list.
	MaxGuidelineFiles = 10
	// GuidelinesBudget is how many characters of the guidelines, all
	// files together, one prompt carries: files in order, the one that
	// does not fit cut, the rest left out, and the prompt says so.
	GuidelinesBudget = 6000
)

// guidelines reads `guidelines`: false (none), true (the defaults) or a
// list of paths in the repository.
func (r *reader) guidelines(n *yaml.Node, key string) *[]string {
	if r.err != nil {
		return nil
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		if b := r.boolean(n, key); b != nil && *b {
			out := slices.Clone(DefaultGuidelines)
			return &out
		}
		out := []string{}
		return &out
	}
	if n.Kind == yaml.SequenceNode && len(n.Content) > MaxGuidelineFiles {
		r.fail(n, key, "%d files, over the limit of %d", len(n.Content), MaxGuidelineFiles)
		return nil
	}
	return r.list(n, key, checkGuidelinePath)
}

// checkGuidelinePath accepts a file's path in the repository.
func checkGuidelinePath(p string) error {
	switch {
	case p == "" || len(p) > 200:
		return fmt.Errorf("want a file's path of 1 to 200 characters, not %q", clip(p))
	case strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || path.Clean(p) != p || strings.HasPrefix(p, "../") || p == "..":
		return fmt.Errorf("%q is not a plain path in the repository (like docs/GUIDE.md)", clip(p))
	case strings.ContainsAny(p, "*?[{\n\r\t`<>"):
		return fmt.Errorf("%q: want a file's path, not a pattern", clip(p))
	}
	return nil
}
