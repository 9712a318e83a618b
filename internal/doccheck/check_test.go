package doccheck

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/prq-dev/prq/internal/config"
)

// strs renders problems for comparison and for failure messages.
func strs(ps []Problem) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

func expectProblems(t *testing.T, what string, got []Problem, want []string) {
	t.Helper()
	if g := strs(got); !slices.Equal(want, g) {
		t.Errorf("%s:\n got %s\nwant %s", what, strings.Join(g, "\n     "), strings.Join(want, "\n     "))
	}
}

// TestCheckLinks: of the testdata site's many kinds of links, exactly
// the broken file and the broken anchor fail.
func TestCheckLinks(t *testing.T) {
	site := NewSite("testdata/site")
	files, err := site.MarkdownFiles()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"README.md", "docs/examples.md", "docs/guide.md"}; !slices.Equal(want, files) {
		t.Fatalf("markdown files %q, want %q", files, want)
	}
	expectProblems(t, "link problems", site.CheckLinks(files), []string{
		`README.md:4: broken link "docs/missing.md": no file docs/missing.md`,
		`README.md:5: broken anchor "docs/guide.md#no-such-heading": no heading or anchor #no-such-heading in docs/guide.md`,
	})
}

func TestResolve(t *testing.T) {
	site := NewSite("testdata/site")
	tests := []struct{ dir, target, want string }{
		{".", "docs/guide.md#faq", ""},
		{"docs", "../README.md", ""},
		{"docs", "../../outside.md", `link "../../outside.md" points outside the repository`},
		{"docs", "guide.md#FAQ", `broken anchor "guide.md#FAQ": no heading or anchor #FAQ in docs/guide.md`},
		{"docs", "guide.md%23faq", `broken link "guide.md%23faq": no file docs/guide.md#faq`},
		{".", "deploy/alerts.yml#L3", ""},
		{".", "mailto:someone@example.com", ""},
		{".", "//example.com/x.md", ""},
		{".", "docs/guide.md#custom%2Did", ""},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			if got := site.resolve(tt.dir, tt.target); got != tt.want {
				t.Fatalf("resolve(%q, %q) = %q, want %q", tt.dir, tt.target, got, tt.want)
			}
		})
	}
}

// TestCheckRefs: references in files that are not Markdown resolve from
// the root; a broken one and a README named in prose fail.
func TestCheckRefs(t *testing.T) {
	site := NewSite("testdata/site")
	expectProblems(t, "alert rules", append(site.CheckRefs("deploy/alerts.yml"), site.MissingRunbooks("deploy/alerts.yml")...), []string{
		`deploy/alerts.yml:12: broken anchor "docs/guide.md#gone": no heading or anchor #gone in docs/guide.md`,
		`deploy/alerts.yml:13: alert NoRunbook has no runbook annotation`,
	})
	expectProblems(t, "fix texts", site.CheckRefs("internal/doctor/fix.go"), []string{
		`internal/doctor/fix.go:5: names the README in prose, which no check can follow: write the page and anchor (docs/page.md#heading)`,
	})
}

// TestCheckExamples: each yaml block of the testdata examples passes
// prq's configuration check, but for the misspelt key; the fragments
// only parse, and the broken one fails; a misspelt marker is reported.
func TestCheckExamples(t *testing.T) {
	got := NewSite("testdata/site").CheckExamples([]string{"docs/examples.md"}, configCheck(t), nil)
	want := []string{"docs/examples.md:23: ", "docs/examples.md:34: yaml fragment does not parse", "docs/examples.md:39: unknown marker prq:fragmnet"}
	g := strs(got)
	if len(g) != len(want) {
		t.Fatalf("problems:\n%s", strings.Join(g, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(g[i], want[i]) {
			t.Errorf("problem %d: %s, want it to start %q", i, g[i], want[i])
		}
	}
	if !strings.Contains(g[0], "modles") || strings.Contains(g[0], os.TempDir()) {
		t.Errorf("the failure should name the bad key and not the temporary file: %s", g[0])
	}
}

// configCheck is `prq config check` on a YAML example: the loader and
// the validator in-process, with a placeholder for every key variable
// the example's providers name.
func configCheck(t *testing.T) func(string) error {
	dir := t.TempDir()
	n := 0
	return func(src string) error {
		n++
		file := filepath.Join(dir, fmt.Sprintf("example-%d.yaml", n))
		if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
			return err
		}
		var keys struct {
			Providers []struct {
				KeyEnv config.EnvList `yaml:"key_env"`
			} `yaml:"providers"`
		}
		_ = yaml.Unmarshal([]byte(src), &keys) // what does not parse, Load reports
		env := map[string]string{"PRQ_CONFIG": file}
		for _, p := range keys.Providers {
			for _, name := range p.KeyEnv {
				env[name] = "doc-example-key-" + name
			}
		}
		c, err := config.Load(func(k string) string { return env[k] }, nil)
		if err == nil {
			err = c.Validate(config.ModeCheck)
		}
		if err != nil {
			return errors.New(strings.ReplaceAll(err.Error(), file, "the example"))
		}
		return nil
	}
}
