package doccheck

import (
	"flag"
	"github.com/prq-dev/prq/internal/repoconfig"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The checks on the repository's own docs: `go test ./...`, which CI
// runs, fails when a doc link, an anchor, a doc reference or a YAML
// example breaks.

var docRoot = flag.String("docroot", "", "the repository whose docs the Repo tests check (default: this one)")

// repoSite returns the site the Repo tests check: -docroot, else this
// repository.
func repoSite(t *testing.T) *Site {
	t.Helper()
	if *docRoot != "" {
		return NewSite(*docRoot)
	}
	return NewSite("../..")
}

// TestRepoLinks: every relative link and #anchor of every Markdown file
// resolves.
func TestRepoLinks(t *testing.T) {
	site := repoSite(t)
	files, err := site.MarkdownFiles()
	if err != nil {
		t.Fatal(err)
	}
	report(t, site.CheckLinks(files))
}

// TestRepoReferences: the doc references outside Markdown resolve: the
// alert rules' runbooks (every alert has one), doctor's fix texts, the
// Helm chart's comments and the example environment.
func TestRepoReferences(t *testing.T) {
	site := repoSite(t)
	files := []string{"deploy/prometheus/alerts.yml", ".env.example"}
	for _, pattern := range []string{"internal/doctor/*.go", "deploy/helm/*/*", "deploy/helm/*/*/*"} {
		matches, err := filepath.Glob(filepath.Join(site.root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range matches {
			rel, _ := filepath.Rel(site.root, m)
			if fi, err := os.Stat(m); err == nil && !fi.IsDir() && !strings.HasSuffix(m, "_test.go") {
				files = append(files, filepath.ToSlash(rel))
			}
		}
	}
	if len(files) < 10 {
		t.Fatalf("found only %q: the layout changed; update the patterns", files)
	}
	var ps []Problem
	for _, f := range files {
		ps = append(ps, site.CheckRefs(f)...)
	}
	report(t, append(ps, site.MissingRunbooks("deploy/prometheus/alerts.yml")...))
}

// TestRepoExamples: every fenced yaml block of the Markdown files passes
// `prq config check`, or is marked <!-- prq:fragment --> and parses, or
// is marked <!-- prq:repo-config --> and is a valid .prq.yaml.
func TestRepoExamples(t *testing.T) {
	site := repoSite(t)
	files, err := site.MarkdownFiles()
	if err != nil {
		t.Fatal(err)
	}
	repo := func(src string) error {
		_, err := repoconfig.Parse(".prq.yaml", []byte(src))
		return err
	}
	report(t, site.CheckExamples(files, configCheck(t), map[string]func(string) error{"repo-config": repo}))
}

func report(t *testing.T, ps []Problem) {
	t.Helper()
	for _, p := range ps {
		t.Errorf("%s", p)
	}
}
