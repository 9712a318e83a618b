package doccheck

import (
	"bytes"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
)

// Page is what the checks need of one Markdown file.
type Page struct {
	// Anchors are the fragments the page answers: its headings' slugs
	// and its explicit id= and name= anchors.
	Anchors map[string]bool
	Links   []Link
	Blocks  []Block
}

// Link is one link target written in a page.
type Link struct {
	Line   int
	Target string
}

// Block is one fenced code block.
type Block struct {
	Line int    // of the opening fence
	Lang string // the info string's first word, lower case: yaml, sh …
	Text string
	// Marker is the word of a <!-- prq:word --> comment standing as the
	// block just before the fence ("" when there is none).
	Marker string
}

// markdown parses as GitHub renders: CommonMark plus tables,
// strikethrough, autolinks and task lists.
var markdown = goldmark.New(goldmark.WithExtensions(extension.GFM))

var (
	htmlRef  = regexp.MustCompile(`(?i)<(?:a|img|link|area|source)\b[^>]*?\s(?:href|src)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))`)
	htmlID   = regexp.MustCompile(`(?i)<[a-z][a-z0-9]*\b[^>]*?\s(?:id|name)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))`)
	markerRe = regexp.MustCompile(`^<!--\s*prq:(\S*)\s*-->$`)
)

// Parse reads a Markdown page. It never fails: what is not Markdown is
// text.
func Parse(src []byte) *Page {
	p := &Page{Anchors: map[string]bool{}}
	starts := []int{0} // the offset of each line
	for i, c := range src {
		if c == '\n' {
			starts = append(starts, i+1)
		}
	}
	lineOf := func(n ast.Node) int {
		pos := n.Pos()
		if pos < 0 && n.Type() == ast.TypeBlock && n.Lines().Len() > 0 {
			pos = n.Lines().At(0).Start
		}
		if pos < 0 {
			return 1
		}
		i, found := slices.BinarySearch(starts, pos)
		if !found {
			i--
		}
		return i + 1
	}
	html := func(n ast.Node, s []byte) {
		for _, m := range htmlID.FindAllSubmatch(s, -1) {
			p.Anchors[string(m[1])+string(m[2])+string(m[3])] = true
		}
		for _, m := range htmlRef.FindAllSubmatch(s, -1) {
			p.Links = append(p.Links, Link{Line: lineOf(n), Target: string(m[1]) + string(m[2]) + string(m[3])})
		}
	}
	slugs := slugger{}
	doc := markdown.Parser().Parse(text.NewReader(src))
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Heading:
			var b strings.Builder
			plain(&b, n, src)
			p.Anchors[slugs.slug(strings.TrimSpace(b.String()))] = true
		case *ast.Link:
			p.Links = append(p.Links, Link{Line: lineOf(n), Target: string(n.Destination)})
		case *ast.Image:
			p.Links = append(p.Links, Link{Line: lineOf(n), Target: string(n.Destination)})
		case *ast.RawHTML:
			var b bytes.Buffer
			for i := range n.Segments.Len() {
				seg := n.Segments.At(i)
				b.Write(seg.Value(src))
			}
			html(n, b.Bytes())
		case *ast.HTMLBlock:
			html(n, blockText(n, src))
		case *ast.FencedCodeBlock:
			lang, _, _ := strings.Cut(string(n.Language(src)), " ")
			b := Block{Line: lineOf(n), Lang: strings.ToLower(lang), Text: string(blockText(n, src))}
			if prev, ok := n.PreviousSibling().(*ast.HTMLBlock); ok {
				if m := markerRe.FindSubmatch(bytes.TrimSpace(blockText(prev, src))); m != nil {
					b.Marker = string(m[1])
				}
			}
			p.Blocks = append(p.Blocks, b)
			return ast.WalkSkipChildren, nil
		case *ast.CodeBlock, *ast.CodeSpan:
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	return p
}

func blockText(n ast.Node, src []byte) []byte {
	var b bytes.Buffer
	for i := range n.Lines().Len() {
		seg := n.Lines().At(i)
		b.Write(seg.Value(src))
	}
	if h, ok := n.(*ast.HTMLBlock); ok && h.HasClosure() {
		b.Write(h.ClosureLine.Value(src))
	}
	return b.Bytes()
}

// plain writes the text GitHub renders for n's inline content: links and
// images by their text, code spans by their content, no emphasis marks
// or HTML tags.
func plain(b *strings.Builder, n ast.Node, src []byte) {
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		switch c := c.(type) {
		case *ast.Text:
			v := util.UnescapePunctuations(c.Segment.Value(src))
			b.Write(util.ResolveEntityNames(util.ResolveNumericReferences(v)))
			if c.SoftLineBreak() {
				b.WriteByte(' ')
			}
		case *ast.String:
			b.Write(c.Value)
		case *ast.RawHTML:
		case *ast.AutoLink:
			b.Write(c.Label(src))
		default:
			plain(b, c, src)
		}
	}
}

// Slug is the anchor GitHub gives a heading's text: lower case, every
// character but letters, digits, marks, spaces, - and _ removed, each
// space a -.
func Slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// slugger numbers repeated slugs as GitHub does: foo, foo-1, foo-2.
type slugger map[string]int

func (s slugger) slug(text string) string {
	base := Slug(text)
	out := base
	for {
		if _, taken := s[out]; !taken {
			break
		}
		s[base]++
		out = base + "-" + strconv.Itoa(s[base])
	}
	s[out] = 0
	return out
}
