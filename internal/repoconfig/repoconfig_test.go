package repoconfig

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const example = `
reviews:
  auto: true                 # review new pull requests and pushes automatically
  drafts: false              # review drafts too
  walkthrough: false         # the summary opens with a walkthrough of the pull request
  base_branches: ["main", "release/.*"]   # patterns; empty = all
  skip_title: ["WIP", "[skip review]"]    # a title containing one skips the automatic review
  skip_authors: ["renovate[bot]"]
  labels: {include: [], exclude: ["no-review"]}
  max_files: 100             # at most this many files reviewed; the rest listed as not reviewed
paths:
  exclude: ["docs/**", "**/*.snap"]       # on top of the operator's filters
  include: []                             # if set, only these are reviewed
  instructions:
    - {path: "**/*_test.go", instructions: "Focus on missing assertions."}
instructions: "This service handles payments; flag any logging of card numbers."
language: en                 # the language prq writes in
chat: true
`

func TestParseExample(t *testing.T) {
	f, err := Parse("acme/api:.prq.yaml", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	c := Default().Apply("acme/api:.prq.yaml", f)
	want := Config{Auto: true, Drafts: false, BaseBranches: []string{"main", "release/.*"}, SkipTitle: []string{"WIP", "[skip review]"},
		SkipAuthors: []string{"renovate[bot]"}, LabelsInclude: []string{}, LabelsExclude: []string{"no-review"}, MaxFiles: 100,
		PathsExclude: []string{"docs/**", "**/*.snap"}, PathsInclude: []string{},
		PathInstructions: []PathInstruction{{Path: "**/*_test.go", Instructions: "Focus on missing assertions."}},
		Instructions:     "This service handles payments; flag any logging of card numbers.", Language: "en", Chat: true, Guidelines: DefaultGuidelines,
		Sources: []string{"defaults", "acme/api:.prq.yaml"}}
	if !reflect.DeepEqual(want, c) {
		t.Errorf("effective configuration:\n got %+v\nwant %+v", c, want)
	}
	for _, empty := range []string{"", "# nothing\n", "---\n", "~\n"} {
		if f, err := Parse("x", []byte(empty)); err != nil || !reflect.DeepEqual(f, File{}) {
			t.Errorf("%q: %+v, %v: want nothing set", empty, f, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	big := "instructions: \"" + strings.Repeat("a", 1<<20) + "\"\n"
	laughs := "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\npaths:\n  exclude: *d\n"
	for _, tc := range []struct {
		name, in string
		line     int
		key      string
		msg      string
	}{
		{"unknown key", "reviews:\n  auto: true\n  draft: true\n", 3, "reviews.draft", "unknown setting; known here: auto, base_branches, drafts, labels, max_files, skip_authors, skip_title, walkthrough"},
		{"wrong type", "reviews:\n  drafts: yes please\n", 2, "reviews.drafts", `want true or false, not the value "yes please"`},
		{"operator's key", "tier: paid\n", 1, "tier", "not a repository setting"},
		{"models", "models:\n  gpt: {}\n", 1, "models", "not a repository setting"},
		{"max_files range", "reviews:\n  max_files: 0\n", 2, "reviews.max_files", "from 1 to 3000"},
		{"bad glob", "paths:\n  exclude: [\"a/[b\"]\n", 2, "paths.exclude", "syntax error in pattern"},
		{"glob with ** inside a segment", "paths:\n  include: [\"src/**.go\"]\n", 2, "paths.include", "whole path segment"},
		{"absolute glob", "paths:\n  exclude: [\"/etc\"]\n", 2, "paths.exclude", "relative"},
		{"bad branch pattern", "reviews:\n  base_branches: [\"release/(\"]\n", 2, "reviews.base_branches", "not a regular expression"},
		{"path instruction without text", "paths:\n  instructions:\n    - path: \"**\"\n", 3, "paths.instructions[0]", "needs both path and instructions"},
		{"language", "language: \"speak like a pirate\"\n", 1, "language", "want a language code"},
		{"not a mapping", "- a\n- b\n", 1, "", "must be a mapping"},
		{"set twice", "chat: true\nchat: false\n", 2, "chat", "set twice"},
		{"invalid YAML", "reviews:\n  auto: [true\n", 1, "", "not valid YAML"},
		{"two documents", "chat: true\n---\nchat: false\n", 2, "", "more than one YAML document"},
		{"a broken second document", "chat: false\n---\n[\n", 3, "", "more than one YAML document"},
		{"a megabyte", big, 0, "", "over the limit of 65536"},
		{"aliases", laughs, 1, "", "anchors and aliases"},
		{"merge keys", "reviews:\n  <<: {auto: false}\n", 2, "", "merge keys"},
		{"long instructions", "instructions: \"" + strings.Repeat("x", MaxInstructions+1) + "\"\n", 1, "instructions", "over the limit of 2000"},
		{"long list", "reviews:\n  skip_title: [" + strings.Repeat("\"x\",", MaxList) + "\"x\"]\n", 2, "reviews.skip_title", "101 entries"},
		{"binary", "chat: \xff\xfe\n", 0, "", "not UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("acme/api:.prq.yaml@abc1234", []byte(tc.in))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want an *Error", err)
			}
			if e.Line != tc.line || e.Key != tc.key || !strings.Contains(e.Msg, tc.msg) {
				t.Errorf("got line %d key %q msg %q; want line %d key %q msg containing %q", e.Line, e.Key, e.Msg, tc.line, tc.key, tc.msg)
			}
			if !strings.HasPrefix(err.Error(), "acme/api:.prq.yaml@abc1234") || len(err.Error()) > 400 {
				t.Errorf("error text %q: want it to name the file, and be short", err)
			}
		})
	}
}

func TestApplyLayers(t *testing.T) {
	org, err := Parse("acme/.github:prq.yaml", []byte("reviews:\n  drafts: true\n  skip_title: [WIP]\nlanguage: ja\ninstructions: org-wide\n"))
	if err != nil {
		t.Fatal(err)
	}
	repo, err := Parse("acme/api:.prq.yaml", []byte("reviews:\n  skip_title: [DRAFT]\ninstructions: repo's own\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := Default().Apply("org", org).Apply("repo", repo)
	if !c.Drafts || c.Language != "ja" {
		t.Errorf("what the repository leaves unset comes from the organisation: %+v", c)
	}
	if !reflect.DeepEqual(c.SkipTitle, []string{"DRAFT"}) || c.Instructions != "repo's own" {
		t.Errorf("what the repository sets replaces the organisation's, lists whole: %+v", c)
	}
	if !reflect.DeepEqual(c.Sources, []string{"defaults", "org", "repo"}) {
		t.Errorf("sources %v", c.Sources)
	}
	if !Default().Apply("org", org).Drafts || Default().Drafts {
		t.Errorf("Apply changed its receiver")
	}
}

func TestSkip(t *testing.T) {
	f, err := Parse("x", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	c := Default().Apply("x", f)
	pr := PR{Title: "Add refunds", Author: "octocat", BaseRef: "main"}
	for _, tc := range []struct {
		name string
		edit func(*PR)
		want string
	}{
		{"reviewed", func(*PR) {}, ""},
		{"release branch", func(p *PR) { p.BaseRef = "release/1.2" }, ""},
		{"other base", func(p *PR) { p.BaseRef = "gh-pages" }, `base branch "gh-pages" is not in reviews.base_branches`},
		{"anchored pattern", func(p *PR) { p.BaseRef = "mainline" }, `base branch "mainline"`},
		{"draft", func(p *PR) { p.Draft = true }, "a draft"},
		{"title", func(p *PR) { p.Title = "wip: refunds" }, `the title contains "WIP"`},
		{"title brackets", func(p *PR) { p.Title = "Bump [skip review]" }, `the title contains "[skip review]"`},
		{"author", func(p *PR) { p.Author = "Renovate[bot]" }, "author Renovate[bot] is in reviews.skip_authors"},
		{"label", func(p *PR) { p.Labels = []string{"bug", "No-Review"} }, `labelled "no-review"`},
	} {
		p := pr
		tc.edit(&p)
		if got := c.Skip(p); !strings.HasPrefix(got, tc.want) || (tc.want == "" && got != "") {
			t.Errorf("%s: Skip = %q, want %q", tc.name, got, tc.want)
		}
	}
	inc := c
	inc.LabelsInclude = []string{"review-me"}
	if got := inc.Skip(pr); got != "no label of reviews.labels.include" {
		t.Errorf("labels.include without the label: %q", got)
	}
	if got := inc.Skip(PR{Title: "x", BaseRef: "main", Labels: []string{"review-me"}}); got != "" {
		t.Errorf("labels.include with the label: %q", got)
	}
	off := c
	off.Auto = false
	if got := off.Skip(pr); !strings.Contains(got, "reviews.auto") {
		t.Errorf("auto off: %q", got)
	}
}

func TestPathsAndInstructions(t *testing.T) {
	f, err := Parse("x", []byte(`paths:
  exclude: ["docs/**", "**/*.snap", "vendor"]
  instructions:
    - {path: "**/*_test.go", instructions: "Focus on missing assertions."}
    - {path: "payments/**", instructions: "Card numbers never reach a log.\n\nAmounts are in cents."}
`))
	if err != nil {
		t.Fatal(err)
	}
	c := Default().Apply("x", f)
	for p, want := range map[string]string{
		"docs/a.md":                 "excluded by docs/**",
		"docs/deep/er/b.md":         "excluded by docs/**",
		"api/docs/c.md":             "",
		"ui/__snapshots__/x.snap":   "excluded by **/*.snap",
		"top.snap":                  "excluded by **/*.snap",
		"vendor":                    "excluded by vendor",
		"main.go":                   "",
		"payments/charge_test.go":   "",
		"internal/docs_test/foo.go": "",
	} {
		if got := c.Excluded(p); !strings.HasPrefix(got, want) || (want == "" && got != "") {
			t.Errorf("Excluded(%q) = %q, want %q", p, got, want)
		}
	}
	if got := c.InstructionsFor("payments/charge_test.go"); got != "Focus on missing assertions.\nCard numbers never reach a log.\nAmounts are in cents." {
		t.Errorf("both instructions, in order, without blank lines: %q", got)
	}
	if got := c.InstructionsFor("main.go"); got != "" {
		t.Errorf("no instruction matches main.go: %q", got)
	}
	inc := Default()
	inc.PathsInclude = []string{"src/**"}
	if inc.Excluded("src/a/b.go") != "" || inc.Excluded("README.md") != "not in .prq.yaml paths.include" {
		t.Errorf("include: %q %q", inc.Excluded("src/a/b.go"), inc.Excluded("README.md"))
	}
	// a glob that matches everything excludes everything, and says so
	all := Default()
	all.PathsExclude = []string{"**"}
	for _, p := range []string{"a", "a/b/c.go", ".github/workflows/ci.yml"} {
		if all.Excluded(p) != "excluded by ** (.prq.yaml paths.exclude)" {
			t.Errorf("** on %q: %q", p, all.Excluded(p))
		}
	}
}

func TestInstructionsBudget(t *testing.T) {
	var pis []PathInstruction
	for range 5 {
		pis = append(pis, PathInstruction{Path: "**", Instructions: strings.Repeat("y", MaxPathInstructions)})
	}
	c := Default()
	c.PathInstructions = pis
	got := c.InstructionsFor("a.go")
	if n := len([]rune(got)); n > PathInstructionsBudget+80 {
		t.Errorf("%d characters, over the budget", n)
	}
	if !strings.HasSuffix(got, "(4 more instructions for this path were left out to fit.)") {
		t.Errorf("the prompt says what was left out: %q", got[len(got)-80:])
	}
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		glob, path string
		want       bool
	}{
		{"*.go", "a/b/c.go", true},
		{"*.go", "c.go", true},
		{"*.go", "c.gox", false},
		{"a/*.go", "a/c.go", true},
		{"a/*.go", "a/b/c.go", false},
		{"a/**/c.go", "a/c.go", true},
		{"a/**/c.go", "a/x/y/c.go", true},
		{"a/**", "a/x/y", true},
		{"a/**", "b/a/x", false},
		{"**/a/**", "x/a/y", true},
		{"**/*_test.go", "pkg/x_test.go", true},
		{"**/*_test.go", "x_test.go", true},
		{"**", "anything/at/all", true},
		{"src/[ab].go", "src/a.go", true},
	} {
		if got := Match(tc.glob, tc.path); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.glob, tc.path, got, tc.want)
		}
	}
	// a hostile glob: many ** against a deep path that almost matches;
	// the matcher's work is bounded by segments × segments
	glob := strings.Repeat("**/", 60) + "z"
	deep := strings.Repeat("a/", 2000) + "y"
	if Match(glob, deep) {
		t.Errorf("hostile glob matched")
	}
	if !Match(glob, deep+"/z") {
		t.Errorf("hostile glob missed")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte("a: &a [1]\nb: *a\n"))
	f.Add([]byte("paths:\n  instructions:\n    - {path: x}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz", data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		c := Default().Apply("fuzz", file)
		c.Skip(PR{Title: "t", BaseRef: "main"})
		c.Excluded("a/b.go")
		c.InstructionsFor("a/b.go")
	})
}

// TestYAMLRoundTrip: the rendering `config` shows is itself a valid
// file that means the same.
func TestYAMLRoundTrip(t *testing.T) {
	f, err := Parse("x", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	c := Default().Apply("x", f)
	back, err := Parse("rendered", []byte(c.YAML()))
	if err != nil {
		t.Fatalf("the rendering does not parse: %v\n%s", err, c.YAML())
	}
	again := Default().Apply("x", back)
	if !reflect.DeepEqual(c, again) {
		t.Errorf("round trip:\n got %+v\nwant %+v\n%s", again, c, c.YAML())
	}
	d := Default().YAML()
	if !strings.Contains(d, "auto: true") || !strings.Contains(d, "language: en") {
		t.Errorf("defaults rendered:\n%s", d)
	}
	if _, err := Parse("defaults", []byte(d)); err != nil {
		t.Errorf("the defaults' rendering does not parse: %v\n%s", err, d)
	}
}
