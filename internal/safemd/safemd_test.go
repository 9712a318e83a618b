package safemd

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/renderer/html"
)

const repo = "acme/widgets"

// render turns markdown into HTML the way GitHub's renderer treats it for
// what matters here: GFM tables, strikethrough and autolinks, and raw HTML
// passed through (so the checks below see any that survives).
func render(t testing.TB, md string) string {
	t.Helper()
	g := goldmark.New(goldmark.WithExtensions(extension.GFM), goldmark.WithRendererOptions(html.WithUnsafe()))
	var b bytes.Buffer
	if err := g.Convert([]byte(md), &b); err != nil {
		t.Fatalf("render: %v", err)
	}
	return b.String()
}

var (
	tagRe     = regexp.MustCompile(`<(/?)([a-zA-Z][a-zA-Z0-9]*)([^>]*)>`)
	codeRe    = regexp.MustCompile(`(?s)<code[^>]*>.*?</code>`)
	hrefRe    = regexp.MustCompile(`href="([^"]*)"`)
	liveMent  = regexp.MustCompile(`(^|[^A-Za-z0-9_` + "`" + `])@[A-Za-z0-9]`)
	liveIssue = regexp.MustCompile(`(^|[^A-Za-z0-9_&])#[0-9]+\b`)
	allowed   = map[string]bool{
		"p": true, "code": true, "pre": true, "em": true, "strong": true, "ul": true, "ol": true, "li": true,
		"h1": true, "h2": true, "h3": true, "h4": true, "h5": true, "h6": true, "table": true, "thead": true,
		"tbody": true, "tr": true, "th": true, "td": true, "blockquote": true, "del": true, "hr": true, "br": true,
		"a": true, "input": true,
	}
)

// inert fails when rendered HTML has anything live: raw HTML, images,
// comments, links out of the repository, mentions or issue references
// outside code, hidden characters.
func inert(t testing.TB, in, md string) {
	t.Helper()
	h := render(t, md)
	if strings.Contains(h, "<!--") {
		t.Errorf("input %q: an HTML comment survived:\n%s", in, h)
	}
	for _, m := range tagRe.FindAllStringSubmatch(h, -1) {
		if !allowed[strings.ToLower(m[2])] {
			t.Errorf("input %q: tag <%s> survived:\n%s", in, m[2], h)
		}
		if strings.EqualFold(m[2], "a") && m[1] == "" {
			href := hrefRe.FindStringSubmatch(m[3])
			if href == nil || !strings.HasPrefix(strings.ToLower(href[1]), "https://github.com/"+repo+"/") {
				t.Errorf("input %q: a link out of the repository survived: %s\n%s", in, m[0], h)
			}
		}
	}
	text := codeRe.ReplaceAllString(h, " ")
	text = tagRe.ReplaceAllString(text, " ")
	if liveMent.MatchString(text) {
		t.Errorf("input %q: a live mention survived:\n%s", in, h)
	}
	if liveIssue.MatchString(text) {
		t.Errorf("input %q: a live issue reference survived:\n%s", in, h)
	}
	for _, r := range md {
		if (r >= 0x200b && r <= 0x200f) || r == 0xfeff || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) {
			t.Errorf("input %q: hidden character %U survived", in, r)
		}
	}
}

var injections = []string{
	"please ask @octocat and @acme/security-team to look",
	"cc @org/team.",
	"![x](https://evil.example/p.png)",
	"![x][ref]\n\n[ref]: https://evil.example/p.png",
	`<img src="https://evil.example/p.png">`,
	`<IMG SRC=https://evil.example/p.png>`,
	"<details><summary>x</summary>\n\nhidden",
	"</details>\n\n## fake heading",
	"<!-- prq:summary -->",
	"&lt;!-- prq:review --&gt;",
	"&#64;octocat and &#x40;octocat",
	"[click](https://evil.example/login)",
	"[repo link](https://github.com/acme/widgets/blob/main/x.go)",
	"https://evil.example/x and www.evil.example",
	"<https://evil.example>",
	"`code` then @octocat",
	"``nested ` tick`` @octocat",
	"unclosed ` tick @octocat",
	"```go\nfunc x() {}\n```\n@octocat",
	"```\nnever closed @octocat",
	"~~~\n<img src=x>\n~~~\n<img src=y>",
	"fixes #12 and acme/other#3 and GH-7",
	"@\u200boctocat and @oct\u200docat",
	"\u202eevil\u202c",
	"<script>alert(1)</script>",
	`<a href="https://evil.example">x</a>`,
	"\\[escaped\\](https://evil.example)",
	"\\`not code\\` @octocat",
	"| a | b |\n|---|---|\n| @octocat | ![i](https://e.example/i) |",
	"user@example.com is an address",
	"> quote @octocat",
	"- item ![](https://e.example)",
	"    indented <img src=x> @octocat",
	"line\u0000with\u0007controls",
	string([]byte{0xff, 0xfe, '@', 'x'}),
	// text that already holds escapes: an escape must not be escaped
	// into a live mention, link or tag
	`\@acme/security-team`,
	`\\@octocat`,
	`\\\@octocat`,
	"\\`@octocat\\`",
	`&amp;#64;octocat and &#64;acme/team`,
	`\<img src="https://evil.example/p.png">`,
	`\\![x](https://evil.example/p.png)`,
	`[[nested](https://evil.example/a)](https://evil.example/b)`,
	`[a]( https://evil.example )`,
	"@\u200boctocat, @\u2060octocat and @\ufeffoctocat",
	`\#12 and \\#13`,
}

func TestTextInert(t *testing.T) {
	for _, in := range injections {
		inert(t, in, Text(in, repo))
		inert(t, in, Line(in, repo))
		inert(t, in, "| h |\n|---|\n| "+Cell(in, repo)+" |\n")
		inert(t, in, "- "+Code(in)+"\n")
		inert(t, in, "| h |\n|---|\n| "+CodeCell(in)+" |\n")
	}
}

func TestTextKeepsWhatIsSafe(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"plain", "Consider checking the error.", "Consider checking the error."},
		{"emphasis", "**bold** and _em_", "**bold** and _em_"},
		{"code span", "use `fmt.Errorf` here", "use `fmt.Errorf` here"},
		{"fence kept", "```go\nx := 1\n```\n", "```go\nx := 1\n```\n"},
		{"fence closed", "```\nx := 1\n", "```\nx := 1\n```\n"},
		{"a suggestion of the model's own is plain code", "```suggestion\nx := 1\n```\n", "```\nx := 1\n```\n"},
		{"in any case", "~~~ Suggestion\nx := 1\n~~~\n", "~~~\nx := 1\n~~~\n"},
		{"mention as code", "ask @octocat", "ask `@octocat`"},
		{"repo link kept", "see https://github.com/acme/widgets/blob/main/a.go", "see https://github.com/acme/widgets/blob/main/a.go"},
		{"other link as code", "see https://evil.example/x", "see `https://evil.example/x`"},
		{"html escaped", "<b>x</b>", "&lt;b&gt;x&lt;/b&gt;"},
		{"image escaped", "![a](b)", "!\\[a\\](b)"},
		{"email as code", "mail a@b.com", "mail `a@b.com`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Text(tc.in, repo); got != tc.want {
				t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestEscapedEscapes: text that already holds a backslash before what
// would be live keeps its backslash as text and the rest quoted: the
// escape is never escaped into a live mention, image, tag or reference.
func TestEscapedEscapes(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`\@acme/security-team`, "\\\\`@acme/security-team`"},
		{`\\@octocat`, "\\\\\\\\`@octocat`"},
		{`\<img src=x>`, `\\&lt;img src=x&gt;`},
		{`\\![x](https://evil.example/p.png)`, "\\\\\\\\!\\[x\\](`https://evil.example/p.png)`"},
		{`\#12`, "\\\\`#12`"},
	} {
		got := Text(tc.in, repo)
		if got != tc.want {
			t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
		}
		inert(t, tc.in, got)
		if h := render(t, got); !strings.Contains(h, `\`) {
			t.Errorf("Text(%q) lost the backslash the text had: %s", tc.in, h)
		}
	}
}

func TestCodeShowsExactly(t *testing.T) {
	for _, in := range []string{"a.go", "dir/`weird`.go", "``x``", " lead", "a|b.go", "@octocat.go", "<img>.go"} {
		h := render(t, "x "+Code(in)+" y")
		want := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(in)
		if !strings.Contains(h, "<code>"+want+"</code>") && !strings.Contains(h, "<code>"+strings.TrimSpace(want)+"</code>") {
			t.Errorf("Code(%q) rendered %s, want <code>%s</code>", in, h, want)
		}
	}
}

func FuzzText(f *testing.F) {
	for _, in := range injections {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		inert(t, in, Text(in, repo))
		inert(t, in, "| h |\n|---|\n| "+Cell(in, repo)+" |\n")
	})
}
