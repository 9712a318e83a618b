package harness

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/renderer/html"

	"github.com/prq-dev/prq/fake/fakeopenai"
)

var (
	inertCode    = regexp.MustCompile(`(?s)<code[^>]*>.*?</code>`)
	inertTag     = regexp.MustCompile(`<[^>]*>`)
	inertComment = regexp.MustCompile(`(?s)<!--.*?-->`)
	// prq's own markers, the only HTML comments a body may carry
	inertMarker  = regexp.MustCompile(`^<!-- prq:(summary part=\d+ tag=|review head=|reply to=\d+ tag=|finding key=[0-9a-f]+ tag=|reviewed=)[^<>]*-->$`)
	inertMention = regexp.MustCompile(`(^|[^A-Za-z0-9_` + "`" + `])@(acme|octocat)`)
)

// TestModelTextInert: the model puts a team and a user mention (one
// behind a backslash already), a remote image, raw <img>, an outside
// link and prq's own marker into every summary, review comment and chat
// answer. Every text prq sends to GitHub (comments, reviews and their
// line comments, replies, check runs) is rendered as GitHub renders it
// and must hold none of them live, while still saying what the model said.
func TestModelTextInert(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	s.fakes.GitHub.RecordRequests()
	s.fakes.OpenAI.SetReplies(fakeopenai.ReplyInject)
	runE2E(t, s, 3)

	md := goldmark.New(goldmark.WithExtensions(extension.GFM), goldmark.WithRendererOptions(html.WithUnsafe()))
	texts, carrying := 0, 0
	for _, r := range s.fakes.GitHub.Requests() {
		if r.Method != http.MethodPost && r.Method != http.MethodPatch || len(r.Body) == 0 {
			continue
		}
		var v any
		if err := json.Unmarshal(r.Body, &v); err != nil {
			continue // not a JSON write (the token exchange has none)
		}
		for _, text := range markdownFields(v, "") {
			texts++
			if strings.Contains(text, "security-team") {
				carrying++
			}
			var b bytes.Buffer
			if err := md.Convert([]byte(text), &b); err != nil {
				t.Fatalf("render: %v", err)
			}
			h := b.String()
			where := r.Method + " " + r.Path
			for _, c := range inertComment.FindAllString(h, -1) {
				if !inertMarker.MatchString(c) {
					t.Errorf("%s: an HTML comment that is not prq's is live: %s\n%s", where, c, text)
				}
			}
			outside := inertComment.ReplaceAllString(h, " ")
			if strings.Contains(strings.ToLower(outside), "<img") {
				t.Errorf("%s: an image is live:\n%s", where, text)
			}
			if strings.Contains(outside, `href="https://evil.example`) {
				t.Errorf("%s: a link out of the repository is live:\n%s", where, text)
			}
			plain := inertTag.ReplaceAllString(inertCode.ReplaceAllString(outside, " "), " ")
			if m := inertMention.FindString(plain); m != "" {
				t.Errorf("%s: a mention is live (%q):\n%s", where, m, text)
			}
		}
	}
	// every summary, review and reply carries the model's words: the
	// check above saw the injection each time, not an empty body
	if carrying < 5 {
		t.Errorf("%d of %d texts sent to GitHub carry the model's injected words, want every summary, review and chat reply (at least 5)", carrying, texts)
	}
	t.Logf("%d markdown texts sent to GitHub, %d carrying the injection, none of it live", texts, carrying)
}

// markdownFields is every string a GitHub write renders as markdown:
// body (comments, reviews, line comments, replies) and a check run's
// output summary and text.
func markdownFields(v any, key string) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			out = append(out, markdownFields(e, k)...)
		}
	case []any:
		for _, e := range x {
			out = append(out, markdownFields(e, key)...)
		}
	case string:
		if key == "body" || key == "summary" || key == "text" {
			out = append(out, x)
		}
	}
	return out
}
