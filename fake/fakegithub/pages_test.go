package fakegithub_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/ghapp"
)

// TestPullPage: a pull request's page shows what the App posted, its
// markdown rendered as GitHub would (tables, <details>), each line
// comment beside the diff lines it sits on, replies under it, the check
// run's history; untrusted HTML is made inert.
func TestPullPage(t *testing.T) {
	fake, app, _ := setup(t, fakegithub.Config{}, "/")
	patch := "@@ -1,4 +1,5 @@\n package a\n-func old() {}\n+func New() error {\n+\treturn nil\n+}\n \n"
	pr := corpus.PR{Repo: "acme/web", Number: 3, Title: "Add New", HeadSHA: strings.Repeat("c", 40), BaseSHA: strings.Repeat("d", 40),
		Files: []corpus.File{{Filename: "a.go", Status: "modified", Additions: 3, Deletions: 1, Changes: 4, Patch: &patch}}}
	fake.AddPR(1, "", "", pr)
	c, _ := app.Client(1)
	ctx := context.Background()
	summary := "## prq summary\n\n1 file at `ccccccc`.\n\n<details><summary>Per-file summaries (1 file)</summary>\n\n| File | Summary |\n|---|---|\n| `a.go` | adds New |\n\n</details>\n\n<!-- prq:summary -->\n" +
		"<script>alert(1)</script>\n\n[x](javascript:alert(1)) <img src=x onerror=alert(1)>"
	if _, err := c.Comment(ctx, "acme", "web", 3, summary); err != nil {
		t.Fatal(err)
	}
	fake.AddComment("acme", "web", 3, "@prq why **this**?", "dev-1")
	if _, err := c.Comment(ctx, "acme", "web", 3, "Because `New` replaces `old`."); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateReview(ctx, "acme", "web", 3, pr.HeadSHA, "prq reviewed 1 file: 1 line comment.",
		[]ghapp.ReviewComment{{Path: "a.go", Line: 4, Side: "RIGHT", Body: "`New` never fails: drop the **error**."}}); err != nil {
		t.Fatal(err)
	}
	id, err := c.CreateCheckRun(ctx, "acme", "web", ghapp.CheckRun{Name: "prq", HeadSHA: pr.HeadSHA, Status: "in_progress", Title: "reviewing", Summary: "0 of 1 files"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.UpdateCheckRun(ctx, "acme", "web", id, ghapp.CheckRun{Name: "prq", Status: "completed", Conclusion: "neutral", Title: "1 comment on 1 reviewed file", Summary: "See the summary."}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(fake)
	defer srv.Close()

	page := get(t, srv.URL+fakegithub.PagesPath+"/acme/web/3")
	for _, want := range []string{
		"<h2>prq summary</h2>", "<details>", "<summary>Per-file summaries (1 file)</summary>", "<td>adds New</td>", // the summary, rendered
		"@prq why <strong>this</strong>?", "dev-1", "Because <code>New</code> replaces <code>old</code>.", // the chat
		`<tr class="add"><td class="n"></td><td class="n">2</td><td>&#43;func New() error {</td></tr>`, // the diff lines above the comment
		`<tr class="add"><td class="n"></td><td class="n">4</td><td>&#43;}</td></tr>`,
		"<code>New</code> never fails: drop the <strong>error</strong>.", // the line comment
		"in_progress", "completed: neutral", "1 comment on 1 reviewed file", // the check run's history
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	for _, bad := range []string{"<script", `href="javascript`, "onerror", "prq:summary"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page carries %q from untrusted text", bad)
		}
	}
	if strings.Contains(page, `<td class="n">1</td><td>`) {
		t.Errorf("the diff shows lines more than three above the comment")
	}

	index := get(t, srv.URL+fakegithub.PagesPath)
	if !strings.Contains(index, `<a href="/_fake/pulls/acme/web/3">acme/web#3</a>`) || !strings.Contains(index, "neutral") {
		t.Errorf("the index does not link the pull request:\n%s", index)
	}
	if res, err := http.Get(srv.URL + fakegithub.PagesPath + "/acme/web/99"); err != nil || res.StatusCode != 404 {
		t.Errorf("an unknown pull request: %v %v", res.StatusCode, err)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET %s: %d %s", url, res.StatusCode, b)
	}
	return string(b)
}
