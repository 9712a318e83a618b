package fakeopenai_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/diff"
	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/review"
	"github.com/prq-dev/prq/llm"
)

// TestReviewFindingsFollowTheLines: the fake's findings are a function of
// each line's path and content: the same line gets the same finding, word
// for word, wherever it moves; another Wording words it otherwise with the
// same substance (review.Key); a prompt that offers "replacement" gets
// some; one that does not, none.
func TestReviewFindingsFollowTheLines(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "m", RPM: 1000, TPM: 1e7}}, Period: time.Hour})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	lines := []string{"a := load()", "b := parse(a)", "if b == nil {", "\treturn nil", "}", "c := b.Run()", "log.Print(c)", "return c"}
	ask := func(system string, ls []string, first int) map[string]review.Finding {
		t.Helper()
		var u strings.Builder
		u.WriteString("Task: review the file below.\nFile: pkg/x.go\n")
		for i, l := range ls {
			fmt.Fprintf(&u, "%4d +%s\n", first+i, l)
		}
		req, _ := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": u.String()}}})
		resp, body := post(t, srv.URL+"/v1/chat/completions", map[string]string{"Authorization": "Bearer k"}, string(req))
		if resp.StatusCode != 200 {
			t.Fatalf("%d %v", resp.StatusCode, body)
		}
		text := body["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
		r, err := review.Parse(text)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]review.Finding{}
		for _, c := range r.Comments {
			out[ls[c.Line-first]] = c
		}
		return out
	}
	guide := review.Guide(llm.FormatText)
	one := ask(guide, lines, 1)
	if len(one) != 2 {
		t.Fatalf("%d findings, want 2", len(one))
	}
	// the lines pushed down by two new ones, another line changed
	moved := append([]string{"// Package x.", ""}, lines...)
	moved[2+6] = "log.Printf(\"%v\", c)"
	two := ask(guide, moved, 1)
	same, suggested := 0, 0
	for l, f := range one {
		if f.Replacement != nil {
			suggested++
			if !strings.HasPrefix(*f.Replacement, l) || *f.Replacement == l {
				t.Errorf("replacement %q does not rewrite its line %q", *f.Replacement, l)
			}
		}
		g, ok := two[l]
		if !ok {
			continue
		}
		same++
		if g.Body != f.Body || (g.Replacement == nil) != (f.Replacement == nil) {
			t.Errorf("line %q: %+v, then %+v", l, f, g)
		}
	}
	for _, g := range two {
		if g.Replacement != nil {
			suggested++
		}
	}
	if same == 0 || suggested == 0 {
		t.Fatalf("%d lines commented in both versions, %d replacements, want some of each: %v, %v", same, suggested, one, two)
	}
	fake.SetWording(1)
	reworded := ask(guide, lines, 1)
	for l, f := range one {
		g := reworded[l]
		if g.Body == f.Body {
			t.Errorf("line %q: Wording 1 says the same words %q", l, g.Body)
		}
		if review.Key("pkg/x.go", diff.Right, []string{l}, g.Body) != review.Key("pkg/x.go", diff.Right, []string{l}, f.Body) {
			t.Errorf("line %q: the reworded finding has another substance: %q vs %q", l, f.Body, g.Body)
		}
	}
	fake.SetWording(0)
	// a prompt without the field gets prose only
	for _, f := range ask("Review the diff. Answer with JSON: {\"summary\": \"\", \"comments\": []}", lines, 1) {
		if f.Replacement != nil {
			t.Errorf("a replacement nobody asked for: %+v", f)
		}
	}
	t.Logf("findings on %d lines, %d kept word for word after the push, %d replacements in both", len(one), same, suggested)
}
