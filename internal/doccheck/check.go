package doccheck

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Problem is one thing found wrong, at a line of a file.
type Problem struct {
	File string // slash-separated, relative to the site's root
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

// Site is a tree of files (a repository) whose Markdown pages are read
// once each.
type Site struct {
	root  string
	pages map[string]*Page
}

// NewSite returns the site rooted at the directory root.
func NewSite(root string) *Site { return &Site{root: root, pages: map[string]*Page{}} }

// skipDirs are directories MarkdownFiles does not enter: test inputs,
// dependencies and build output.
var skipDirs = map[string]bool{"testdata": true, "node_modules": true, "out": true, "bench-out": true, "chaos-out": true, "bin": true}

// MarkdownFiles lists the site's .md files, sorted, skipping hidden
// directories and skipDirs.
func (s *Site) MarkdownFiles() ([]string, error) {
	var out []string
	err := filepath.WalkDir(s.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != s.root && (strings.HasPrefix(d.Name(), ".") || skipDirs[d.Name()]) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.EqualFold(path.Ext(d.Name()), ".md") {
			rel, err := filepath.Rel(s.root, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("doccheck: list markdown files: %w", err)
	}
	slices.Sort(out)
	return out, nil
}

// Page returns the parsed page at rel, a slash path under the root.
func (s *Site) Page(rel string) (*Page, error) {
	if p, ok := s.pages[rel]; ok {
		return p, nil
	}
	b, err := os.ReadFile(filepath.Join(s.root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, fmt.Errorf("doccheck: read %s: %w", rel, err)
	}
	p := Parse(b)
	s.pages[rel] = p
	return p, nil
}

// CheckLinks checks every link of the named pages: a relative link's
// file must exist, and an #anchor into a Markdown page must be one of
// its headings or explicit anchors. External links are not fetched.
func (s *Site) CheckLinks(files []string) []Problem {
	var out []Problem
	for _, f := range files {
		p, err := s.Page(f)
		if err != nil {
			out = append(out, Problem{File: f, Msg: err.Error()})
			continue
		}
		for _, l := range p.Links {
			if msg := s.resolve(path.Dir(f), l.Target); msg != "" {
				out = append(out, Problem{File: f, Line: l.Line, Msg: msg})
			}
		}
	}
	return out
}

var schemeRe = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// resolve checks a link target written in a file of the directory dir
// ("." for the root); it returns what is wrong, or "".
func (s *Site) resolve(dir, target string) string {
	if schemeRe.MatchString(target) || strings.HasPrefix(target, "//") {
		return "" // external: not fetched
	}
	p, frag, _ := strings.Cut(target, "#")
	p, _, _ = strings.Cut(p, "?")
	p, err := url.PathUnescape(p)
	if err != nil {
		return fmt.Sprintf("link %q: malformed path", target)
	}
	if frag, err = url.PathUnescape(frag); err != nil {
		return fmt.Sprintf("link %q: malformed anchor", target)
	}
	rel := path.Clean(path.Join(dir, p))
	if strings.HasPrefix(p, "/") {
		rel = path.Clean(strings.TrimPrefix(p, "/"))
	}
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Sprintf("link %q points outside the repository", target)
	}
	fi, err := os.Stat(filepath.Join(s.root, filepath.FromSlash(rel)))
	if err != nil {
		return fmt.Sprintf("broken link %q: no file %s", target, rel)
	}
	if frag == "" || fi.IsDir() || !strings.EqualFold(path.Ext(rel), ".md") {
		return "" // line anchors of code files and the like are GitHub's
	}
	page, err := s.Page(rel)
	if err != nil {
		return err.Error()
	}
	if !page.Anchors[frag] {
		return fmt.Sprintf("broken anchor %q: no heading or anchor #%s in %s", target, frag, rel)
	}
	return ""
}

var (
	// refRe finds a path to a Markdown file, with an optional anchor,
	// standing on its own in text (not inside a URL).
	refRe = regexp.MustCompile("(?:^|[\\s\"'(`\\[<=,])((?:\\.{1,2}/|/)?[\\w.-]+(?:/[\\w.-]+)*\\.md(?:#[^\\s\"'()`<>\\],;]*)?)")
	// proseReadme is the README named in prose ("see README, Runbook"),
	// which no check can follow.
	proseReadme = regexp.MustCompile(`\bREADME\b(\.md)?`)
)

// CheckRefs checks the doc references in a file that is not Markdown
// (doctor's fix texts, alert rules, chart comments): every path to a .md
// file, with its #anchor, must resolve from the site's root. A mention
// of the README that names no file cannot be checked, so it is reported
// too.
func (s *Site) CheckRefs(file string) []Problem {
	b, err := os.ReadFile(filepath.Join(s.root, filepath.FromSlash(file)))
	if err != nil {
		return []Problem{{File: file, Msg: fmt.Sprintf("doccheck: read %s: %v", file, err)}}
	}
	var out []Problem
	for i, line := range strings.Split(string(b), "\n") {
		for _, m := range refRe.FindAllStringSubmatch(line, -1) {
			ref := strings.TrimRight(m[1], ".:")
			if msg := s.resolve(".", ref); msg != "" {
				out = append(out, Problem{File: file, Line: i + 1, Msg: msg})
			}
		}
		for _, m := range proseReadme.FindAllStringSubmatch(line, -1) {
			if m[1] == "" {
				out = append(out, Problem{File: file, Line: i + 1, Msg: "names the README in prose, which no check can follow: write the page and anchor (docs/page.md#heading)"})
			}
		}
	}
	return out
}

// MissingRunbooks reports the alert rules of a Prometheus rules file
// whose runbook annotation is missing or is not a link (a path to a .md
// file with its anchor, or an http(s) URL). CheckRefs checks where the
// links lead.
func (s *Site) MissingRunbooks(file string) []Problem {
	b, err := os.ReadFile(filepath.Join(s.root, filepath.FromSlash(file)))
	if err != nil {
		return []Problem{{File: file, Msg: fmt.Sprintf("doccheck: read %s: %v", file, err)}}
	}
	var doc struct {
		Groups []struct {
			Rules []struct {
				Alert       yaml.Node         `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return []Problem{{File: file, Msg: fmt.Sprintf("not a rules file: %v", err)}}
	}
	var out []Problem
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r.Alert.Value == "" {
				continue // a recording rule
			}
			rb := r.Annotations["runbook"]
			switch {
			case rb == "":
				out = append(out, Problem{File: file, Line: r.Alert.Line, Msg: fmt.Sprintf("alert %s has no runbook annotation", r.Alert.Value)})
			case strings.HasPrefix(rb, "https://") || strings.HasPrefix(rb, "http://"):
			case !refRe.MatchString(rb) || !strings.Contains(rb, "#"):
				out = append(out, Problem{File: file, Line: r.Alert.Line, Msg: fmt.Sprintf("alert %s: runbook %q is not a link to a page and anchor (docs/page.md#heading)", r.Alert.Value, rb)})
			}
		}
	}
	return out
}

// FragmentMarker marks a YAML example that is a piece of a file, or
// another tool's YAML: written on the line before its fence, it is only
// parsed, not validated.
const FragmentMarker = "<!-- prq:fragment -->"

// CheckExamples checks every fenced yaml block of the named pages:
// validate must accept it (the tests pass prq's configuration check),
// except a block marked with FragmentMarker, which only has to parse,
// and one marked <!-- prq:word --> for a word of byMarker, which that
// validator must accept (a repository's .prq.yaml: "repo-config").
func (s *Site) CheckExamples(files []string, validate func(src string) error, byMarker map[string]func(src string) error) []Problem {
	var out []Problem
	for _, f := range files {
		p, err := s.Page(f)
		if err != nil {
			out = append(out, Problem{File: f, Msg: err.Error()})
			continue
		}
		for _, b := range p.Blocks {
			if b.Lang != "yaml" && b.Lang != "yml" {
				continue
			}
			switch b.Marker {
			case "":
				if err := validate(b.Text); err != nil {
					out = append(out, Problem{File: f, Line: b.Line, Msg: fmt.Sprintf("yaml example fails prq config check (mark a deliberate fragment with %s): %v", FragmentMarker, err)})
				}
			case "fragment":
				if err := parseAll(b.Text); err != nil {
					out = append(out, Problem{File: f, Line: b.Line, Msg: fmt.Sprintf("yaml fragment does not parse: %v", err)})
				}
			default:
				v, ok := byMarker[b.Marker]
				if !ok {
					out = append(out, Problem{File: f, Line: b.Line, Msg: fmt.Sprintf("unknown marker prq:%s before the example (the markers are %s%s)", b.Marker, FragmentMarker, otherMarkers(byMarker))})
					continue
				}
				if err := v(b.Text); err != nil {
					out = append(out, Problem{File: f, Line: b.Line, Msg: fmt.Sprintf("yaml example marked prq:%s is refused: %v", b.Marker, err)})
				}
			}
		}
	}
	return out
}

func otherMarkers(m map[string]func(string) error) string {
	var names []string
	for k := range m {
		names = append(names, "<!-- prq:"+k+" -->")
	}
	sort.Strings(names)
	if len(names) == 0 {
		return ""
	}
	return ", " + strings.Join(names, ", ")
}

// parseAll parses every YAML document of src.
func parseAll(src string) error {
	dec := yaml.NewDecoder(strings.NewReader(src))
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
