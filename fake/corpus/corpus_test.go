package corpus_test

import (
	"os"
	"testing"

	"github.com/prq-dev/prq/diff"
	"github.com/prq-dev/prq/fake/corpus"
)

func TestGeneratedPatchesParse(t *testing.T) {
	prs := corpus.Generate(200, 1)
	files, chars := 0, 0
	for _, p := range prs {
		for _, f := range p.Files {
			files++
			if f.Patch == nil {
				continue
			}
			chars += len(*f.Patch)
			d, err := diff.Parse(*f.Patch)
			if err != nil {
				t.Fatalf("%s %s: %v\n%s", p.Repo, f.Filename, err, *f.Patch)
			}
			if got := len(d.Added()); got != f.Additions {
				t.Fatalf("%s: additions %d, patch has %d", f.Filename, f.Additions, got)
			}
		}
	}
	t.Logf("200 PRs: %d files (corpus: 792), mean patch %d chars (corpus: 2793)", files, chars/files)
	if files < 500 || files > 1200 {
		t.Errorf("file count %d far from the corpus's 792", files)
	}
}

func TestSharedCorpusParses(t *testing.T) {
	wd, _ := os.Getwd()
	path := corpus.Find(wd)
	if path == "" {
		t.Skip("../shared/fixtures/pr-corpus not present: skipping the real-corpus replay")
	}
	prs, err := corpus.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for _, p := range prs {
		for _, f := range p.Files {
			if f.Patch == nil {
				continue
			}
			if _, err := diff.Parse(*f.Patch); err != nil {
				bad++
				t.Logf("%s#%d %s: %v", p.Repo, p.Number, f.Filename, err)
			}
		}
	}
	if len(prs) != 200 || bad > 0 {
		t.Fatalf("%d PRs, %d unparseable patches", len(prs), bad)
	}
}
