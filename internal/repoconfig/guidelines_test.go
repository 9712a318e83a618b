package repoconfig

import (
	"reflect"
	"strings"
	"testing"
)

// TestGuidelines: `guidelines` is off with false, the defaults with true
// or unset, a list of plain paths otherwise; the organisation's list is
// replaced by the repository's; a pattern, a path out of the repository
// or too many files is refused with the key named.
func TestGuidelines(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want []string
	}{
		{"language: en\n", DefaultGuidelines},
		{"guidelines: false\n", []string{}},
		{"guidelines: true\n", DefaultGuidelines},
		{"guidelines: [docs/REVIEWING.md, AGENTS.md]\n", []string{"docs/REVIEWING.md", "AGENTS.md"}},
		{"guidelines: []\n", []string{}},
	} {
		f, err := Parse("t", []byte(tc.yaml))
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		org, _ := Parse("org", []byte("guidelines: [ORG.md]\n"))
		if got := Default().Apply("org", org).Apply("t", f).Guidelines; f.Guidelines != nil && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.yaml, got, tc.want)
		} else if f.Guidelines == nil && !reflect.DeepEqual(Default().Guidelines, tc.want) {
			t.Errorf("%q: defaults %q, want %q", tc.yaml, Default().Guidelines, tc.want)
		}
	}
	if y := Default().Apply("t", File{Guidelines: &[]string{}}).YAML(); !strings.Contains(y, "guidelines: []") {
		t.Errorf("off is not shown:\n%s", y)
	}
	for _, bad := range []string{"guidelines: [\"docs/*.md\"]\n", "guidelines: [../secrets]\n", "guidelines: [/etc/passwd]\n", "guidelines: {a: b}\n",
		"guidelines: [" + strings.Repeat("a.md, ", MaxGuidelineFiles) + "b.md]\n"} {
		_, err := Parse("t", []byte(bad))
		if err == nil || !strings.Contains(err.Error(), "guidelines") {
			t.Errorf("%q: %v, want an error naming guidelines", bad, err)
		}
	}
}
