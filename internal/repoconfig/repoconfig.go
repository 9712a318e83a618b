// Package repoconfig reads a repository's .prq.yaml: what its
// maintainers choose of the reviews prq makes (which pull requests are
// reviewed automatically, which paths, with which instructions, in
// which language). The file is read from the base branch, never from
// the pull request's head, so a pull request cannot rewrite its own
// rules; an organisation's defaults (prq.yaml in its .github
// repository) lie beneath it, and the operator's configuration bounds
// both: a file can narrow what is reviewed and change how, never raise
// a tier, a quota, a model or a limit (it has no such keys).
//
// Parse is strict about the file and tells which key, on which line, is
// wrong and why; a file it refuses is reported and the layer beneath
// applies.
package repoconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Limits on what a file may hold: a file over them is refused, with the
// limit named.
const (
	// MaxBytes is the largest file read.
	MaxBytes = 64 << 10
	// MaxList is the most entries a list may hold.
	MaxList = 100
	// MaxInstructions is the longest text of the repository's
	// instructions, and MaxPathInstructions of one path's.
	MaxInstructions     = 2000
	MaxPathInstructions = 1000
	// PathInstructionsBudget is how much of the instructions of the
	// paths a file matches one prompt carries; the rest are left out,
	// and the prompt says so.
	PathInstructionsBudget = 2000
	// MaxFiles is the largest max_files (GitHub lists at most 3,000
	// files of a pull request).
	MaxFiles = 3000
)

// Paths a repository's file is read from, in this order (the first
// found is used), and the organisation's defaults (in its .github
// repository).
var (
	Paths   = []string{".prq.yaml", ".github/prq.yaml"}
	OrgRepo = ".github"
	OrgPath = "prq.yaml"
)

// File is one parsed file: a nil field was not set there, so the layer
// beneath applies.
type File struct {
	Auto, Drafts           *bool
	Walkthrough            *bool
	BaseBranches           *[]string
	SkipTitle, SkipAuthors *[]string
	LabelsInclude          *[]string
	LabelsExclude          *[]string
	MaxFiles               *int
	PathsExclude           *[]string
	PathsInclude           *[]string
	PathInstructions       *[]PathInstruction
	Instructions           *string
	Language               *string
	Chat                   *bool
	Guidelines             *[]string
}

// PathInstruction is an instruction for the files a glob matches.
type PathInstruction struct {
	Path         string `yaml:"path"`
	Instructions string `yaml:"instructions"`
}

// Config is the configuration in effect for a repository.
type Config struct {
	Auto, Drafts bool
	// Walkthrough: the summary comment opens with a walkthrough of the
	// pull request (one call on the summary model per head; none for a
	// pull request of one file).
	Walkthrough   bool
	BaseBranches  []string
	SkipTitle     []string
	SkipAuthors   []string
	LabelsInclude []string
	LabelsExclude []string
	// MaxFiles: at most this many files reviewed, 0 for no limit.
	MaxFiles         int
	PathsExclude     []string
	PathsInclude     []string
	PathInstructions []PathInstruction
	Instructions     string
	// Language is the language prq writes in ("" for English).
	Language string
	Chat     bool
	// Guidelines are the files read as the repository's guidelines, in
	// order (none: off).
	Guidelines []string
	// Sources say where it came from, beneath first ("defaults",
	// "acme/.github:prq.yaml", …).
	Sources []string
}

// Default is the configuration where no file says otherwise.
func Default() Config {
	return Config{Auto: true, Walkthrough: true, Chat: true, Guidelines: slices.Clone(DefaultGuidelines), Sources: []string{"defaults"}}
}

// Error is a file prq could not use: where, and why.
type Error struct {
	// Source names the file ("acme/api:.prq.yaml at 1a2b3c4").
	Source string
	// Line is the line of the key or value at fault (0: the whole file).
	Line int
	// Key is the setting's dotted name ("reviews.drafts"), "" for the
	// file as a whole.
	Key string
	Msg string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source)
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, " line %d", e.Line)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, ": %s", e.Key)
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Parse reads a file's bytes. An empty file (or one of comments) sets
// nothing. The error is an *Error.
func Parse(source string, data []byte) (File, error) {
	var f File
	fail := func(line int, key, format string, a ...any) (File, error) {
		return File{}, &Error{Source: source, Line: line, Key: key, Msg: fmt.Sprintf(format, a...)}
	}
	if len(data) > MaxBytes {
		return fail(0, "", "the file is %d bytes, over the limit of %d", len(data), MaxBytes)
	}
	if !utf8.Valid(data) {
		return fail(0, "", "the file is not UTF-8 text")
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return f, nil // empty
		}
		line, msg := yamlError(err)
		return fail(line, "", "not valid YAML: %s", msg)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return fail(extra.Line, "", "more than one YAML document: a file holds one")
	} else if !errors.Is(err, io.EOF) {
		line, _ := yamlError(err)
		return fail(line, "", "more than one YAML document: a file holds one")
	}
	if len(doc.Content) == 0 {
		return f, nil
	}
	root := doc.Content[0]
	if err := noAliases(root); err != nil {
		return File{}, &Error{Source: source, Line: err.Line, Key: "", Msg: err.Msg}
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return f, nil
	}
	r := reader{source: source}
	r.mapping(root, "", map[string]func(*yaml.Node, string){
		"reviews": func(n *yaml.Node, key string) {
			r.mapping(n, key, map[string]func(*yaml.Node, string){
				"auto":          func(n *yaml.Node, key string) { f.Auto = r.boolean(n, key) },
				"drafts":        func(n *yaml.Node, key string) { f.Drafts = r.boolean(n, key) },
				"walkthrough":   func(n *yaml.Node, key string) { f.Walkthrough = r.boolean(n, key) },
				"base_branches": func(n *yaml.Node, key string) { f.BaseBranches = r.list(n, key, checkBranchPattern) },
				"skip_title":    func(n *yaml.Node, key string) { f.SkipTitle = r.list(n, key, checkWord(200)) },
				"skip_authors":  func(n *yaml.Node, key string) { f.SkipAuthors = r.list(n, key, checkWord(100)) },
				"labels": func(n *yaml.Node, key string) {
					r.mapping(n, key, map[string]func(*yaml.Node, string){
						"include": func(n *yaml.Node, key string) { f.LabelsInclude = r.list(n, key, checkWord(100)) },
						"exclude": func(n *yaml.Node, key string) { f.LabelsExclude = r.list(n, key, checkWord(100)) },
					})
				},
				"max_files": func(n *yaml.Node, key string) { f.MaxFiles = r.integer(n, key, 1, MaxFiles) },
			})
		},
		"paths": func(n *yaml.Node, key string) {
			r.mapping(n, key, map[string]func(*yaml.Node, string){
				"exclude":      func(n *yaml.Node, key string) { f.PathsExclude = r.list(n, key, checkGlob) },
				"include":      func(n *yaml.Node, key string) { f.PathsInclude = r.list(n, key, checkGlob) },
				"instructions": func(n *yaml.Node, key string) { f.PathInstructions = r.pathInstructions(n, key) },
			})
		},
		"instructions": func(n *yaml.Node, key string) { f.Instructions = r.text(n, key, MaxInstructions) },
		"language":     func(n *yaml.Node, key string) { f.Language = r.language(n, key) },
		"chat":         func(n *yaml.Node, key string) { f.Chat = r.boolean(n, key) },
		"guidelines":   func(n *yaml.Node, key string) { f.Guidelines = r.guidelines(n, key) },
	})
	if r.err != nil {
		return File{}, r.err
	}
	return f, nil
}

// notHere names settings people look for in the file that only the
// operator sets.
var notHere = map[string]bool{"tier": true, "tiers": true, "quota": true, "quotas": true, "model": true, "models": true, "limits": true, "concurrency": true, "priority": true}

type reader struct {
	source string
	err    *Error
}

func (r *reader) fail(n *yaml.Node, key, format string, a ...any) {
	if r.err == nil {
		r.err = &Error{Source: r.source, Line: n.Line, Key: key, Msg: fmt.Sprintf(format, a...)}
	}
}

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func (r *reader) mapping(n *yaml.Node, key string, fields map[string]func(*yaml.Node, string)) {
	if r.err != nil {
		return
	}
	if n.Kind != yaml.MappingNode {
		what := "the file"
		if key != "" {
			what = key
		}
		r.fail(n, key, "%s must be a mapping of settings, not %s", what, kindOf(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content) && r.err == nil; i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := join(key, k.Value)
		if k.Kind != yaml.ScalarNode {
			r.fail(k, key, "a key must be a plain name")
			return
		}
		if seen[k.Value] {
			r.fail(k, name, "set twice")
			return
		}
		seen[k.Value] = true
		h, ok := fields[k.Value]
		if !ok {
			if key == "" && notHere[k.Value] {
				r.fail(k, name, "not a repository setting: tiers, quotas, models and limits are the operator's")
				return
			}
			r.fail(k, name, "unknown setting; known here: %s", known(fields))
			return
		}
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			continue // "key:" with nothing: not set
		}
		h(v, name)
	}
}

func known(fields map[string]func(*yaml.Node, string)) string {
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func kindOf(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return fmt.Sprintf("the value %q", clip(n.Value))
	}
}

func clip(s string) string {
	if r := []rune(s); len(r) > 40 {
		return string(r[:40]) + "…"
	}
	return s
}

func (r *reader) boolean(n *yaml.Node, key string) *bool {
	if r.err != nil {
		return nil
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		var b bool
		if err := n.Decode(&b); err == nil {
			return &b
		}
	}
	r.fail(n, key, "want true or false, not %s", kindOf(n))
	return nil
}

func (r *reader) integer(n *yaml.Node, key string, lo, hi int) *int {
	if r.err != nil {
		return nil
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		v, err := strconv.Atoi(n.Value)
		if err == nil && v >= lo && v <= hi {
			return &v
		}
	}
	r.fail(n, key, "want a whole number from %d to %d, not %s", lo, hi, kindOf(n))
	return nil
}

func (r *reader) text(n *yaml.Node, key string, max int) *string {
	if r.err != nil {
		return nil
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		r.fail(n, key, "want text, not %s", kindOf(n))
		return nil
	}
	if c := utf8.RuneCountInString(n.Value); c > max {
		r.fail(n, key, "%d characters, over the limit of %d", c, max)
		return nil
	}
	s := strings.TrimSpace(n.Value)
	return &s
}

// list reads a list of strings, each checked; a single string is a list
// of one.
func (r *reader) list(n *yaml.Node, key string, check func(string) error) *[]string {
	if r.err != nil {
		return nil
	}
	items := []*yaml.Node{n}
	if n.Kind == yaml.SequenceNode {
		items = n.Content
	}
	if len(items) > MaxList {
		r.fail(n, key, "%d entries, over the limit of %d", len(items), MaxList)
		return nil
	}
	out := []string{}
	for _, it := range items {
		if it.Kind != yaml.ScalarNode || it.Tag == "!!null" {
			r.fail(it, key, "want a list of text, not %s in it", kindOf(it))
			return nil
		}
		if err := check(it.Value); err != nil {
			r.fail(it, key, "%v", err)
			return nil
		}
		out = append(out, it.Value)
	}
	return &out
}

func (r *reader) pathInstructions(n *yaml.Node, key string) *[]PathInstruction {
	if r.err != nil {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		r.fail(n, key, "want a list of {path, instructions}, not %s", kindOf(n))
		return nil
	}
	if len(n.Content) > MaxList {
		r.fail(n, key, "%d entries, over the limit of %d", len(n.Content), MaxList)
		return nil
	}
	out := []PathInstruction{}
	for i, it := range n.Content {
		name := fmt.Sprintf("%s[%d]", key, i)
		var pi PathInstruction
		var glob, text *string
		r.mapping(it, name, map[string]func(*yaml.Node, string){
			"path":         func(n *yaml.Node, key string) { glob = r.text(n, key, maxGlob) },
			"instructions": func(n *yaml.Node, key string) { text = r.text(n, key, MaxPathInstructions) },
		})
		if r.err != nil {
			return nil
		}
		if glob == nil || text == nil {
			r.fail(it, name, "each entry needs both path and instructions")
			return nil
		}
		if err := checkGlob(*glob); err != nil {
			r.fail(it, name+".path", "%v", err)
			return nil
		}
		pi.Path, pi.Instructions = *glob, *text
		out = append(out, pi)
	}
	return &out
}

var languageCode = regexp.MustCompile(`^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8}){0,2}$`)

func (r *reader) language(n *yaml.Node, key string) *string {
	s := r.text(n, key, 20)
	if s == nil {
		return nil
	}
	if !languageCode.MatchString(*s) {
		r.fail(n, key, "want a language code such as en, ja or pt-BR, not %q", clip(*s))
		return nil
	}
	return s
}

func checkBranchPattern(p string) error {
	if p == "" || len(p) > 200 {
		return fmt.Errorf("a branch pattern of 1 to 200 characters, not %d", len(p))
	}
	if _, err := regexp.Compile("^(?:" + p + ")$"); err != nil {
		return fmt.Errorf("branch pattern %q is not a regular expression: %v", clip(p), err)
	}
	return nil
}

func checkWord(max int) func(string) error {
	return func(s string) error {
		if strings.TrimSpace(s) == "" || len(s) > max {
			return fmt.Errorf("want text of 1 to %d characters, not %q", max, clip(s))
		}
		return nil
	}
}

// aliasError is an anchor or alias in a file.
type aliasError struct {
	Line int
	Msg  string
}

// noAliases refuses anchors, aliases and merge keys: a repository file
// has no use for them, and they are how a small file expands into a
// huge one.
func noAliases(n *yaml.Node) *aliasError {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return &aliasError{Line: n.Line, Msg: "YAML anchors and aliases (& and *) are not accepted in this file"}
	}
	if n.Tag == "!!merge" {
		return &aliasError{Line: n.Line, Msg: "YAML merge keys (<<) are not accepted in this file"}
	}
	for _, c := range n.Content {
		if err := noAliases(c); err != nil {
			return err
		}
	}
	return nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func yamlError(err error) (int, string) {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n, m[2]
	}
	return 0, strings.TrimPrefix(err.Error(), "yaml: ")
}

// Apply lays a file over c: what the file sets replaces c's (lists
// whole, not merged).
func (c Config) Apply(source string, f File) Config {
	set := func(dst *[]string, src *[]string) {
		if src != nil {
			*dst = slices.Clone(*src)
		}
	}
	if f.Auto != nil {
		c.Auto = *f.Auto
	}
	if f.Drafts != nil {
		c.Drafts = *f.Drafts
	}
	if f.Walkthrough != nil {
		c.Walkthrough = *f.Walkthrough
	}
	set(&c.BaseBranches, f.BaseBranches)
	set(&c.SkipTitle, f.SkipTitle)
	set(&c.SkipAuthors, f.SkipAuthors)
	set(&c.LabelsInclude, f.LabelsInclude)
	set(&c.LabelsExclude, f.LabelsExclude)
	if f.MaxFiles != nil {
		c.MaxFiles = *f.MaxFiles
	}
	set(&c.PathsExclude, f.PathsExclude)
	set(&c.PathsInclude, f.PathsInclude)
	if f.PathInstructions != nil {
		c.PathInstructions = slices.Clone(*f.PathInstructions)
	}
	if f.Instructions != nil {
		c.Instructions = *f.Instructions
	}
	if f.Language != nil {
		c.Language = *f.Language
	}
	if f.Chat != nil {
		c.Chat = *f.Chat
	}
	set(&c.Guidelines, f.Guidelines)
	c.Sources = append(append([]string(nil), c.Sources...), source)
	return c
}

// PR is what the automatic review rules look at.
type PR struct {
	Draft         bool
	Title, Author string
	BaseRef       string
	Labels        []string
}

// Skip returns why the rules skip a pull request's automatic review, or
// "" when it is reviewed.
func (c Config) Skip(pr PR) string {
	switch {
	case !c.Auto:
		return "automatic reviews are off (reviews.auto)"
	case pr.Draft && !c.Drafts:
		return "a draft (reviews.drafts is false)"
	}
	if len(c.BaseBranches) > 0 {
		ok := false
		for _, p := range c.BaseBranches {
			if re, err := regexp.Compile("^(?:" + p + ")$"); err == nil && re.MatchString(pr.BaseRef) {
				ok = true
				break
			}
		}
		if !ok {
			return fmt.Sprintf("base branch %q is not in reviews.base_branches", pr.BaseRef)
		}
	}
	title := strings.ToLower(pr.Title)
	for _, w := range c.SkipTitle {
		if strings.Contains(title, strings.ToLower(w)) {
			return fmt.Sprintf("the title contains %q (reviews.skip_title)", w)
		}
	}
	for _, a := range c.SkipAuthors {
		if strings.EqualFold(a, pr.Author) {
			return fmt.Sprintf("author %s is in reviews.skip_authors", pr.Author)
		}
	}
	has := func(label string) bool {
		for _, l := range pr.Labels {
			if strings.EqualFold(l, label) {
				return true
			}
		}
		return false
	}
	for _, l := range c.LabelsExclude {
		if has(l) {
			return fmt.Sprintf("labelled %q (reviews.labels.exclude)", l)
		}
	}
	if len(c.LabelsInclude) > 0 {
		for _, l := range c.LabelsInclude {
			if has(l) {
				return ""
			}
		}
		return "no label of reviews.labels.include"
	}
	return ""
}

// Excluded returns why the configuration keeps a path from review, or
// "" when it is reviewed.
func (c Config) Excluded(p string) string {
	if g, ok := matchAny(c.PathsExclude, p); ok {
		return "excluded by " + g + " (.prq.yaml paths.exclude)"
	}
	if len(c.PathsInclude) > 0 {
		if _, ok := matchAny(c.PathsInclude, p); !ok {
			return "not in .prq.yaml paths.include"
		}
	}
	return ""
}

// InstructionsFor returns the instructions of the paths p matches, in
// the file's order, within PathInstructionsBudget characters; what does
// not fit is left out and the text says so.
func (c Config) InstructionsFor(p string) string {
	var b strings.Builder
	left := 0
	for _, pi := range c.PathInstructions {
		if !Match(pi.Path, p) {
			continue
		}
		t := oneParagraph(pi.Instructions)
		if utf8.RuneCountInString(b.String())+utf8.RuneCountInString(t)+1 > PathInstructionsBudget {
			left++
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString(t)
	}
	if left > 0 {
		fmt.Fprintf(&b, "\n(%d more instructions for this path were left out to fit.)", left)
	}
	return b.String()
}

// RepoInstructions is the repository's instructions as prompts carry
// them.
func (c Config) RepoInstructions() string { return oneParagraph(c.Instructions) }

var blankLines = regexp.MustCompile(`\n\s*\n+`)

// oneParagraph keeps a text's lines but not its blank ones: a prompt's
// header ends at its first blank line.
func oneParagraph(s string) string {
	return strings.TrimSpace(blankLines.ReplaceAllString(strings.ReplaceAll(s, "\r\n", "\n"), "\n"))
}

// YAML renders the configuration in the file's schema, every key with
// its value in effect.
func (c Config) YAML() string {
	type labels struct {
		Include []string `yaml:"include"`
		Exclude []string `yaml:"exclude"`
	}
	type reviews struct {
		Auto         bool     `yaml:"auto"`
		Drafts       bool     `yaml:"drafts"`
		Walkthrough  bool     `yaml:"walkthrough"`
		BaseBranches []string `yaml:"base_branches"`
		SkipTitle    []string `yaml:"skip_title"`
		SkipAuthors  []string `yaml:"skip_authors"`
		Labels       labels   `yaml:"labels,flow"`
		MaxFiles     int      `yaml:"max_files,omitempty"` // 0: no limit
	}
	type paths struct {
		Exclude      []string          `yaml:"exclude"`
		Include      []string          `yaml:"include"`
		Instructions []PathInstruction `yaml:"instructions"`
	}
	type file struct {
		Reviews      reviews  `yaml:"reviews"`
		Paths        paths    `yaml:"paths"`
		Instructions string   `yaml:"instructions"`
		Language     string   `yaml:"language"`
		Chat         bool     `yaml:"chat"`
		Guidelines   []string `yaml:"guidelines"`
	}
	nz := func(s []string) []string {
		if s == nil {
			return []string{}
		}
		return s
	}
	lang := c.Language
	if lang == "" {
		lang = "en"
	}
	pis := c.PathInstructions
	if pis == nil {
		pis = []PathInstruction{}
	}
	out, err := yaml.Marshal(file{
		Reviews: reviews{Auto: c.Auto, Drafts: c.Drafts, Walkthrough: c.Walkthrough, BaseBranches: nz(c.BaseBranches), SkipTitle: nz(c.SkipTitle), SkipAuthors: nz(c.SkipAuthors),
			Labels: labels{Include: nz(c.LabelsInclude), Exclude: nz(c.LabelsExclude)}, MaxFiles: c.MaxFiles},
		Paths:        paths{Exclude: nz(c.PathsExclude), Include: nz(c.PathsInclude), Instructions: pis},
		Instructions: c.Instructions, Language: lang, Chat: c.Chat, Guidelines: nz(c.Guidelines),
	})
	if err != nil {
		return fmt.Sprintf("# could not render: %v\n", err) // unreachable: plain values
	}
	return string(out)
}
