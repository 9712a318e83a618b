package fakegithub

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/microcosm-cc/bluemonday"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/renderer/html"

	"github.com/prq-dev/prq/diff"
)

// PagesPath is where the fake serves its pull-request pages: what was
// posted on each pull request, rendered as GitHub would show it (the
// demo prints this address and its dashboard links here).
const PagesPath = "/_fake/pulls"

// Markdown renders GitHub-flavoured markdown as GitHub shows it: GFM
// (tables, strikethrough, autolinks, task lists), the raw HTML GitHub
// allows (<details>, <summary>, ...) kept and the rest — scripts, event
// handlers, javascript: links — removed, HTML comments (prq's markers)
// hidden. What it renders is untrusted model output.
func Markdown(md string) template.HTML {
	var b bytes.Buffer
	if err := markdown.Convert([]byte(md), &b); err != nil {
		return template.HTML("<pre>" + template.HTMLEscapeString(md) + "</pre>")
	}
	return template.HTML(sanitizer.SanitizeBytes(b.Bytes()))
}

var (
	markdown  = goldmark.New(goldmark.WithExtensions(extension.GFM), goldmark.WithRendererOptions(html.WithUnsafe()))
	sanitizer = func() *bluemonday.Policy {
		p := bluemonday.UGCPolicy()
		p.AllowElements("details", "summary")
		p.AllowAttrs("open").OnElements("details")
		return p
	}()
)

// EachComment calls fn with every conversation comment, in no order, in
// one pass (fn must not call the Server).
func (s *Server) EachComment(fn func(IssueComment)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.comments {
		fn(*c)
	}
}

// FileCount is how many files a pull request changes (0 when unknown).
func (s *Server) FileCount(owner, repo string, n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.prs[key(owner, repo, n)]; ok {
		return len(p.files)
	}
	return 0
}

// pages adds the pull-request pages to m.
func (s *Server) pages(m *http.ServeMux) {
	m.HandleFunc("GET "+PagesPath, s.pullsPage)
	m.HandleFunc("GET "+PagesPath+"/{owner}/{repo}/{n}", s.pullPage)
}

// pullRow is one pull request in the index.
type pullRow struct {
	Key, Link, Title          string
	Files, Comments, LineCmts int
	Replies                   int
	Check                     string
	number                    int
}

// pullRows lists the pull requests prq wrote to, newest first, then the
// others.
func (s *Server) pullRows() []pullRow {
	s.mu.Lock()
	defer s.mu.Unlock()
	latest := map[string]*CheckRun{} // repo@head -> its newest check run
	for _, c := range s.checks {
		if l, ok := latest[c.Repo+"@"+c.HeadSHA]; !ok || c.ID > l.ID {
			latest[c.Repo+"@"+c.HeadSHA] = c
		}
	}
	var rows []pullRow
	for k, p := range s.prs {
		r := pullRow{Key: k, Link: fmt.Sprintf("%s/%s/%s/%d", PagesPath, p.owner, p.repo, p.number), Title: p.title, Files: len(p.files), number: p.number}
		if st, ok := s.stats[k]; ok {
			r.Comments, r.LineCmts, r.Replies = st.CommentsCreated, st.ReviewComments, st.Replies
		}
		if c, ok := latest[p.owner+"/"+p.repo+"@"+p.head]; ok {
			r.Check = c.Status
			if c.Conclusion != "" {
				r.Check = c.Conclusion
			}
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool {
		wi, wj := rows[i].Comments+rows[i].LineCmts > 0, rows[j].Comments+rows[j].LineCmts > 0
		if wi != wj {
			return wi
		}
		if rows[i].number != rows[j].number {
			return rows[i].number > rows[j].number
		}
		return rows[i].Key < rows[j].Key
	})
	return rows
}

func (s *Server) pullsPage(w http.ResponseWriter, r *http.Request) {
	rows := s.pullRows()
	if len(rows) > 500 {
		rows = rows[:500]
	}
	servePage(w, pullsTmpl, map[string]any{"Rows": rows})
}

// pullView is one pull request's page.
type pullView struct {
	Key, Title, Author, Head, Base string
	Conversation                   []commentView
	Reviews                        []reviewView
	Checks                         []CheckRun
	Files                          int
}

type commentView struct {
	ID     int64
	Author string
	Bot    bool
	Body   template.HTML
}

type reviewView struct {
	ID       int64
	Author   string
	Event    string
	Commit   string
	Body     template.HTML
	Comments []threadView
}

// threadView is a line comment beside the diff lines it sits on, with
// the replies to it.
type threadView struct {
	Path, Side string
	Line       int
	Diff       []diff.Line
	Comment    commentView
	Replies    []commentView
}

func (s *Server) pullPage(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.PathValue("n"))
	owner, repo := r.PathValue("owner"), r.PathValue("repo")
	if err != nil {
		http.NotFound(w, r)
		return
	}
	v, ok := s.pullView(owner, repo, n)
	if !ok {
		http.NotFound(w, r)
		return
	}
	servePage(w, pullTmpl, v)
}

// pullView gathers what was posted on a pull request: its conversation
// (the summary comment, chat questions and replies), its reviews with
// each line comment on its diff lines, and its check runs' histories.
func (s *Server) pullView(owner, repo string, n int) (pullView, bool) {
	s.mu.Lock()
	p, ok := s.prs[key(owner, repo, n)]
	var v pullView
	var heads []string
	patches := map[string]string{}
	if ok {
		v = pullView{Key: key(owner, repo, n), Title: p.title, Author: p.author, Head: p.head, Base: p.base, Files: len(p.files)}
		for at := p.head; at != ""; at = p.parent[at] {
			heads = append(heads, at)
		}
		for _, f := range p.files {
			if f.Patch != nil {
				patches[f.Filename] = *f.Patch
			}
		}
	}
	s.mu.Unlock()
	if !ok {
		return v, false
	}
	bot := s.Bot()
	view := func(id int64, author, body string) commentView {
		return commentView{ID: id, Author: author, Bot: author == bot, Body: Markdown(body)}
	}
	for _, c := range s.Comments(owner, repo, n) {
		v.Conversation = append(v.Conversation, view(c.ID, c.Author, c.Body))
	}
	threads := map[int64]*threadView{}
	byReview := map[int64][]int64{}
	for _, c := range s.ReviewComments(owner, repo, n) {
		if t, ok := threads[c.InReplyTo]; ok && c.InReplyTo != 0 {
			t.Replies = append(t.Replies, view(c.ID, c.Author, c.Body))
			threads[c.ID] = t
			continue
		}
		threads[c.ID] = &threadView{Path: c.Path, Side: c.Side, Line: c.Line, Diff: diffAround(patches[c.Path], c.Side, c.StartLine, c.Line),
			Comment: view(c.ID, c.Author, c.Body)}
		byReview[c.ReviewID] = append(byReview[c.ReviewID], c.ID)
	}
	for _, rv := range s.Reviews(owner, repo, n) {
		r := reviewView{ID: rv.ID, Author: rv.Author, Event: rv.Event, Commit: rv.CommitID, Body: Markdown(rv.Body)}
		for _, id := range byReview[rv.ID] {
			r.Comments = append(r.Comments, *threads[id])
		}
		v.Reviews = append(v.Reviews, r)
	}
	if single := byReview[0]; len(single) > 0 { // line comments posted outside a review
		r := reviewView{Event: "line comments"}
		for _, id := range single {
			r.Comments = append(r.Comments, *threads[id])
		}
		v.Reviews = append(v.Reviews, r)
	}
	for _, h := range heads {
		v.Checks = append(v.Checks, s.CheckRuns(owner, repo, h)...)
	}
	return v, true
}

// diffAround returns the diff lines a comment on line (from start, when
// it spans several) of side sits on, as GitHub shows them above the
// comment: the commented lines and up to three before them, from the
// hunk holding line; nil when the patch does not hold it.
func diffAround(patch, side string, start, line int) []diff.Line {
	p, err := diff.Parse(patch)
	if err != nil {
		return nil
	}
	sd := diff.Side(side)
	if sd != diff.Left {
		sd = diff.Right
	}
	h := p.HunkOf(sd, line)
	if h < 0 {
		return nil
	}
	lines := p.Hunks[h].Lines
	at := func(l diff.Line) int {
		if sd == diff.Left {
			return l.Old
		}
		return l.New
	}
	end := -1
	for i, l := range lines {
		if at(l) == line {
			end = i
		}
	}
	first := max(0, end-3)
	if start > 0 && start < line {
		for i, l := range lines[:end+1] {
			if at(l) == start {
				first = min(first, i)
			}
		}
	}
	return lines[first : end+1]
}

func servePage(w http.ResponseWriter, t *template.Template, data any) {
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	// the pages show untrusted text: no script runs on them at all
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src https: data:")
	h.Set("X-Content-Type-Options", "nosniff")
	w.Write(b.Bytes())
}

var funcs = template.FuncMap{
	"short": func(s string) string { return s[:min(7, len(s))] },
	"op": func(l diff.Line) string {
		return map[byte]string{'+': "add", '-': "del"}[l.Op]
	},
	"num": func(n int) string {
		if n == 0 {
			return ""
		}
		return strconv.Itoa(n)
	},
	"lower":    strings.ToLower,
	"markdown": Markdown,
}

const pageStyle = `<style>
body{font:14px/1.5 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:#1f2328;margin:0;background:#fff}
main{max-width:980px;margin:0 auto;padding:16px 24px}
h1{font-size:24px;font-weight:400;margin:8px 0}h2{font-size:18px;border-bottom:1px solid #d1d9e0;padding-bottom:6px;margin-top:28px}
.meta{color:#59636e}.box{border:1px solid #d1d9e0;border-radius:6px;margin:12px 0}
.head{background:#f6f8fa;border-bottom:1px solid #d1d9e0;padding:8px 16px;border-radius:6px 6px 0 0;color:#59636e}
.head b{color:#1f2328}.body{padding:8px 16px}.bot{background:#ddf4ff;color:#0969da;border-radius:2em;padding:0 6px;font-size:12px;margin-left:4px}
.markdown table{border-collapse:collapse}.markdown td,.markdown th{border:1px solid #d1d9e0;padding:4px 10px}
.markdown code{background:#eff1f3;border-radius:4px;padding:1px 4px;font-size:85%}
.markdown blockquote{border-left:4px solid #d1d9e0;margin:0;padding:0 12px;color:#59636e}
.diff{width:100%;border-collapse:collapse;font:12px/20px ui-monospace,SFMono-Regular,Menlo,monospace}
.diff td{padding:0 8px;white-space:pre-wrap;word-break:break-all}.diff td.n{color:#59636e;width:1%;text-align:right;user-select:none;white-space:nowrap;word-break:normal}
.diff tr.add{background:#dafbe1}.diff tr.del{background:#ffebe9}
.thread{border-top:1px solid #d1d9e0}.reply{border-top:1px solid #eaeef2;margin-left:24px}
.path{font:12px ui-monospace,monospace;padding:6px 16px;background:#f6f8fa;border-bottom:1px solid #d1d9e0}
table.list{border-collapse:collapse;width:100%}table.list td,table.list th{border-bottom:1px solid #eaeef2;padding:6px 8px;text-align:left}
.success{color:#1a7f37}.neutral,.queued,.in_progress{color:#59636e}.failure,.action_required{color:#d1242f}
</style>`

var pullsTmpl = template.Must(template.New("pulls").Funcs(funcs).Parse(`<!doctype html><html><head><meta charset="utf-8"><title>pull requests · fake GitHub</title>` + pageStyle + `</head><body><main>
<h1>Pull requests</h1><p class="meta">What prq posted on each pull request, as GitHub would show it (this is the demo's fake GitHub; the pages are rendered from its records).</p>
<table class="list"><tr><th>pull request</th><th>title</th><th>files</th><th>comments</th><th>line comments</th><th>replies</th><th>check</th></tr>
{{range .Rows}}<tr><td><a href="{{.Link}}">{{.Key}}</a></td><td>{{.Title}}</td><td>{{.Files}}</td><td>{{.Comments}}</td><td>{{.LineCmts}}</td><td>{{.Replies}}</td><td class="{{.Check}}">{{.Check}}</td></tr>
{{else}}<tr><td colspan="7">no pull requests yet</td></tr>{{end}}</table></main></body></html>`))

var pullTmpl = template.Must(template.New("pull").Funcs(funcs).Parse(`{{define "comment"}}<div class="head"><b>{{.Author}}</b>{{if .Bot}}<span class="bot">bot</span>{{end}} commented</div><div class="body markdown" data-comment="{{.ID}}">{{.Body}}</div>{{end}}
<!doctype html><html><head><meta charset="utf-8"><title>{{.Title}} · {{.Key}}</title>` + pageStyle + `</head><body><main>
<p><a href="` + PagesPath + `">all pull requests</a></p>
<h1>{{.Title}} <span class="meta">{{.Key}}</span></h1>
<p class="meta">{{.Author}} wants to merge <code>{{short .Head}}</code> into <code>{{short .Base}}</code> · {{.Files}} changed file{{if ne .Files 1}}s{{end}}</p>
<h2>Conversation</h2>
{{range .Conversation}}<div class="box conversation">{{template "comment" .}}</div>{{else}}<p class="meta">no comments yet</p>{{end}}
<h2>Reviews</h2>
{{range .Reviews}}<div class="box review" data-review="{{.ID}}"><div class="head"><b>{{.Author}}</b> reviewed{{if .Commit}} <code>{{short .Commit}}</code>{{end}} · {{lower .Event}}</div>
<div class="body markdown">{{.Body}}</div>
{{range .Comments}}<div class="thread"><div class="path">{{.Path}} · line {{.Line}}{{if eq .Side "LEFT"}} (base){{end}}</div>
<table class="diff">{{range .Diff}}<tr class="{{op .}}"><td class="n">{{num .Old}}</td><td class="n">{{num .New}}</td><td>{{printf "%c" .Op}}{{.Text}}</td></tr>{{end}}</table>
<div class="linecomment">{{template "comment" .Comment}}</div>
{{range .Replies}}<div class="reply">{{template "comment" .}}</div>{{end}}</div>{{end}}</div>
{{else}}<p class="meta">no reviews yet</p>{{end}}
<h2>Checks</h2>
{{range .Checks}}<div class="box check"><div class="head"><b>{{.Name}}</b> on <code>{{short .HeadSHA}}</code> · <span class="{{.Conclusion}}">{{.Status}}{{if .Conclusion}}: {{.Conclusion}}{{end}}</span>{{if .Title}} · {{.Title}}{{end}}</div>
<div class="body"><ol class="history">{{range .History}}<li>{{.At.Format "15:04:05.000"}} {{.Status}}{{if .Conclusion}}: {{.Conclusion}}{{end}}</li>{{end}}</ol>
{{if .Summary}}<div class="markdown">{{markdown .Summary}}</div>{{end}}</div></div>
{{else}}<p class="meta">no check runs</p>{{end}}
</main></body></html>`))
