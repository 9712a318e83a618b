package gitlab_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegitlab"
	"github.com/prq-dev/prq/forge"
	"github.com/prq-dev/prq/gitlab"
	"github.com/prq-dev/prq/jobs"
)

const (
	proj  = "acme/platform/api"
	base  = "b000000000000000000000000000000000000000"
	head1 = "a100000000000000000000000000000000000000"
	head2 = "a200000000000000000000000000000000000000"
)

// patch: line 10 context, 11 deleted (old), 11 and 12 added (new), 12/13 context.
const patch = "@@ -10,3 +10,4 @@ func f() {\n ctx := 1\n-old := 2\n+neu := 2\n+more := 3\n return ctx\n"

type env struct {
	fake   *fakegitlab.Server
	client *gitlab.Client
	tenant int64
}

func setup(t *testing.T, cfg fakegitlab.Config) env {
	t.Helper()
	fake := fakegitlab.New(cfg)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	fake.AddToken("glpat-test", "group_7_bot_1")
	fake.AddProject(proj, "main", base, map[string]string{".prq.yaml": "language: en\n"})
	p := patch
	files := []corpus.File{{Filename: "main.go", Status: "modified", Additions: 2, Deletions: 1, Patch: &p}, {Filename: "big.bin", Status: "modified"}}
	if err := fake.AddMR(proj, 3, "alice", corpus.PR{Title: "Add more", HeadSHA: head1, BaseSHA: base, Files: files}); err != nil {
		t.Fatal(err)
	}
	tenant, _ := jobs.GitLabTenant(7)
	ts, err := gitlab.New(gitlab.Config{BaseURL: srv.URL, Tenants: []gitlab.Tenant{{ID: 7, Path: "acme", Token: "glpat-test"}}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := ts.Client(tenant)
	if err != nil {
		t.Fatal(err)
	}
	return env{fake: fake, client: c, tenant: tenant}
}

func TestRead(t *testing.T) {
	e := setup(t, fakegitlab.Config{})
	ctx := context.Background()
	pr, err := e.client.PR(ctx, "acme/platform", "api", 3)
	if err != nil {
		t.Fatal(err)
	}
	if pr.HeadSHA != head1 || pr.BaseSHA != base || pr.BaseRef != "main" || pr.State != "open" || pr.Author != "alice" {
		t.Errorf("PR = %+v", pr)
	}
	files, err := e.client.Files(ctx, "acme/platform", "api", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files[0].Patch == nil || files[0].Additions != 2 || files[0].Deletions != 1 || files[1].Patch != nil {
		t.Errorf("files = %+v (want main.go with its patch, big.bin too large without)", files)
	}
	fc, err := e.client.Contents(ctx, "acme/platform", "api", ".prq.yaml", base)
	if err != nil || string(fc.Content) != "language: en\n" || fc.SHA == "" {
		t.Errorf("contents = %+v, %v", fc, err)
	}
	if _, err := e.client.Contents(ctx, "acme/platform", "api", "absent.txt", base); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("absent file: %v, want ErrNotFound", err)
	}
	if _, err := e.client.PR(ctx, "acme/platform", "api", 99); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("absent merge request: %v, want ErrNotFound", err)
	}
}

func TestFilesPaged(t *testing.T) {
	e := setup(t, fakegitlab.Config{})
	var many []corpus.File
	for i := 0; i < 230; i++ {
		p := "@@ -0,0 +1 @@\n+x\n"
		many = append(many, corpus.File{Filename: "f" + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + strings.Repeat("y", i/26), Status: "added", Patch: &p})
	}
	if err := e.fake.Push(proj, 3, head2, many); err != nil {
		t.Fatal(err)
	}
	files, err := e.client.Files(context.Background(), "acme/platform", "api", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 232 {
		t.Errorf("%d files, want 232 over three pages", len(files))
	}
}

func TestSummaryUpsertedOnce(t *testing.T) {
	e := setup(t, fakegitlab.Config{})
	ctx := context.Background()
	marker := "<!-- prq:summary:k1 -->"
	// someone pastes the marker: it adopts nothing
	e.fake.AddNote(proj, 3, "mallory", "copy "+marker)
	id1, err := e.client.UpsertComment(ctx, "acme/platform", "api", 3, 0, marker, marker+"\nfirst")
	if err != nil {
		t.Fatal(err)
	}
	// a retry that lost the id finds the note by its marker
	id2, err := e.client.UpsertComment(ctx, "acme/platform", "api", 3, 0, marker, marker+"\nsecond")
	if err != nil {
		t.Fatal(err)
	}
	if id1 != id2 {
		t.Errorf("upsert created a second note: %d then %d", id1, id2)
	}
	var ours []string
	for _, n := range e.fake.Notes(proj, 3) {
		if n.Author == "group_7_bot_1" {
			ours = append(ours, n.Body)
		}
	}
	if len(ours) != 1 || !strings.HasSuffix(ours[0], "second") {
		t.Errorf("bot notes = %q, want one, updated", ours)
	}
}

func TestReviewPositions(t *testing.T) {
	e := setup(t, fakegitlab.Config{})
	ctx := context.Background()
	comments := []forge.ReviewComment{
		{Path: "main.go", Line: 11, Side: "RIGHT", Body: "added line"},
		{Path: "main.go", Line: 11, Side: "LEFT", Body: "deleted line"},
		{Path: "main.go", Line: 10, Side: "RIGHT", Body: "context line"},
		{Path: "main.go", Line: 12, StartLine: 11, Side: "RIGHT", Body: "a range"},
		{Path: "main.go", Line: 99, Side: "RIGHT", Body: "nowhere"},
	}
	// a round that died before its publish left a draft behind
	id, err := e.client.CreateReview(ctx, "acme/platform", "api", 3, head1, "<!-- prq:review:h1 -->\nReview", comments)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]int{}
	var body string
	for _, n := range e.fake.Notes(proj, 3) {
		if n.DiffNote {
			got[n.Body] = [2]int{n.OldLine, n.NewLine}
			if n.HeadSHA != head1 {
				t.Errorf("%q at head %s", n.Body, n.HeadSHA)
			}
		} else if n.ID == id {
			body = n.Body
		}
	}
	want := map[string][2]int{"added line": {0, 11}, "deleted line": {11, 0}, "context line": {10, 10}, "a range": {0, 12}}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%q at old/new %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) || !strings.Contains(body, "nowhere") || !strings.Contains(body, "outside the diff") {
		t.Errorf("diff notes %v; body %q: the finding on no line belongs in the body", got, body)
	}
	if has, err := e.client.HasReview(ctx, "acme/platform", "api", 3, "<!-- prq:review:h1 -->"); err != nil || has != id {
		t.Errorf("HasReview = %d, %v; want %d", has, err, id)
	}
}

// TestSuggestions: a committable suggestion on a range is GitLab's
// (suggestion:-N+0, relative to the line the note sits on); one with a
// line GitLab could read as a quick action is plain code.
func TestSuggestions(t *testing.T) {
	e := setup(t, fakegitlab.Config{})
	ctx := context.Background()
	comments := []forge.ReviewComment{
		{Path: "main.go", Line: 12, StartLine: 11, Side: "RIGHT", Body: "two lines\n\n```suggestion\nneu, more := 2, 3\n```\n"},
		{Path: "main.go", Line: 11, Side: "RIGHT", Body: "one line\n\n```suggestion\nneu := 2 // two\n```\n"},
		{Path: "main.go", Line: 10, Side: "RIGHT", Body: "a comment line\n\n````suggestion\n// ctx is one\nctx := 1\n````\n"},
	}
	if _, err := e.client.CreateReview(ctx, "acme/platform", "api", 3, head1, "review", comments); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, n := range e.fake.Notes(proj, 3) {
		if n.DiffNote {
			got[strings.SplitN(n.Body, "\n", 2)[0]] = n.Body
		}
	}
	for first, want := range map[string]string{
		"two lines":      "```suggestion:-1+0\nneu, more := 2, 3\n```",
		"one line":       "```suggestion\nneu := 2 // two\n```",
		"a comment line": "````\n",
	} {
		if !strings.Contains(got[first], want) {
			t.Errorf("%s: %q, want it to hold %q", first, got[first], want)
		}
	}
	if strings.Contains(got["a comment line"], "suggestion") {
		t.Errorf("a suggestion with a line beginning with / is committable: %q", got["a comment line"])
	}
}

func TestReviewRetryAfterCrashPublishesOnce(t *testing.T) {
	e := setup(t, fakegitlab.Config{})
	ctx := context.Background()
	comments := []forge.ReviewComment{{Path: "main.go", Line: 11, Side: "RIGHT", Body: "added line"}}
	// the first try dies at its publish: its drafts stay behind
	e.fake.FailNext("bulk_publish", http.StatusInternalServerError)
	if _, err := e.client.CreateReview(ctx, "acme/platform", "api", 3, head1, "body", comments); err == nil {
		t.Fatal("the failed publish was not reported")
	}
	if _, err := e.client.CreateReview(ctx, "acme/platform", "api", 3, head1, "body", comments); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, note := range e.fake.Notes(proj, 3) {
		if note.DiffNote {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d diff notes after a retried round, want 1", n)
	}
}

func TestNothingRunsFromWhatTheBotPosts(t *testing.T) {
	e := setup(t, fakegitlab.Config{})
	ctx := context.Background()
	evil := "Fine.\n/merge\n/approve\ncc @all ~bug !3 %v1 &4 $5"
	if _, err := e.client.Comment(ctx, "acme/platform", "api", 3, evil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.CreateReview(ctx, "acme/platform", "api", 3, head1, evil, []forge.ReviewComment{{Path: "main.go", Line: 11, Side: "RIGHT", Body: "/close"}}); err != nil {
		t.Fatal(err)
	}
	if ran := e.fake.Executed(); len(ran) > 0 {
		t.Errorf("GitLab ran quick actions from the bot's notes: %q", ran)
	}
	// the fake does run them: a person's /close closes
	e.fake.AddNote(proj, 3, "alice", "/close")
	if len(e.fake.Executed()) != 1 {
		t.Errorf("the fake ran no quick action from a person's note")
	}
}

func TestReplyReactResolve(t *testing.T) {
	e := setup(t, fakegitlab.Config{})
	ctx := context.Background()
	if _, err := e.client.CreateReview(ctx, "acme/platform", "api", 3, head1, "body", []forge.ReviewComment{{Path: "main.go", Line: 11, Side: "RIGHT", Body: "finding"}}); err != nil {
		t.Fatal(err)
	}
	threads, err := e.client.ReviewThreads(ctx, "acme/platform", "api", 3)
	if err != nil || len(threads) != 1 || !threads[0].Comments[0].Ours {
		t.Fatalf("threads = %+v, %v", threads, err)
	}
	root := threads[0].Comments[0].ID
	if _, err := e.client.Reply(ctx, "acme/platform", "api", 3, root, "fixed, thanks"); err != nil {
		t.Fatal(err)
	}
	if err := e.client.ResolveThread(ctx, threads[0].ID); err != nil {
		t.Fatal(err)
	}
	for range 2 { // a retried reaction is awarded once
		if err := e.client.React(ctx, "acme/platform", "api", 3, root, true, "eyes"); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.fake.Awards(proj, 3, root); !slices.Equal(got, []string{"eyes"}) {
		t.Errorf("awards = %q", got)
	}
	threads, _ = e.client.ReviewThreads(ctx, "acme/platform", "api", 3)
	if len(threads) != 1 || !threads[0].Resolved || len(threads[0].Comments) != 2 {
		t.Errorf("after reply and resolve: %+v", threads)
	}
}

// TestCommentVotes: the people's thumbsup and thumbsdown on the bot's
// diff notes, each person once, none for one who gave both, the bot's
// own left out.
func TestCommentVotes(t *testing.T) {
	e := setup(t, fakegitlab.Config{})
	ctx := context.Background()
	if _, err := e.client.CreateReview(ctx, "acme/platform", "api", 3, head1, "body", []forge.ReviewComment{{Path: "main.go", Line: 11, Side: "RIGHT", Body: "finding"}}); err != nil {
		t.Fatal(err)
	}
	e.fake.AddNote(proj, 3, "alice", "a note of a person's")
	own, err := e.client.OwnReviewComments(ctx, "acme/platform", "api", 3)
	if err != nil || len(own) != 1 || own[0].Body != "finding" {
		t.Fatalf("OwnReviewComments = %+v, %v; want the one diff note", own, err)
	}
	id := own[0].ID
	for _, a := range [][2]string{{"alice", "thumbsup"}, {"bob", "thumbsdown"}, {"carol", "thumbsup"}, {"carol", "thumbsdown"}, {"dave", "rocket"}} {
		e.fake.Award(proj, 3, id, a[0], a[1])
	}
	if err := e.client.React(ctx, "acme/platform", "api", 3, id, true, "+1"); err != nil { // the bot's own
		t.Fatal(err)
	}
	v, err := e.client.CommentVotes(ctx, "acme/platform", "api", 3, id)
	if err != nil || !slices.Equal(v.Up, []string{"alice"}) || !slices.Equal(v.Down, []string{"bob"}) {
		t.Errorf("CommentVotes = %+v, %v; want up [alice], down [bob]", v, err)
	}
	if _, err := e.client.CommentVotes(ctx, "acme/platform", "api", 3, 999999); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("votes of a note that is not there: %v, want forge.ErrNotFound", err)
	}
}

func TestCommitStatus(t *testing.T) {
	e := setup(t, fakegitlab.Config{})
	ctx := context.Background()
	r := forge.CheckRun{Name: "prq review", HeadSHA: head1, Status: "queued", Title: "Queued"}
	id, err := e.client.CreateCheckRun(ctx, "acme/platform", "api", r)
	if err != nil {
		t.Fatal(err)
	}
	r.Status = "in_progress"
	for range 2 { // running twice: GitLab refuses the same transition; it is done already
		if err := e.client.UpdateCheckRun(ctx, "acme/platform", "api", id, r); err != nil {
			t.Fatal(err)
		}
	}
	r.Status, r.Conclusion, r.Title = "completed", "success", strings.Repeat("é", 300)
	if err := e.client.UpdateCheckRun(ctx, "acme/platform", "api", id, r); err != nil {
		t.Fatal(err)
	}
	if got := e.fake.Statuses(proj, head1, "prq review"); len(got) != 1 || !slices.Equal(got[0], []string{"pending", "running", "success"}) {
		t.Errorf("status history = %q", got)
	}
	if found, err := e.client.FindCheckRun(ctx, "acme/platform", "api", head1, "prq review"); err != nil || found != id {
		t.Errorf("FindCheckRun = %d, %v; want %d", found, err, id)
	}
}

func TestRateLimited(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	e := setup(t, fakegitlab.Config{RequestsPerPeriod: 2, Period: time.Minute, NowFunc: func() time.Time { return now }})
	ctx := context.Background()
	var err error
	for range 3 {
		_, err = e.client.PR(ctx, "acme/platform", "api", 3)
	}
	var rl *forge.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter != time.Minute {
		t.Fatalf("third call: %v, want a rate limit of 1m", err)
	}
	if e.fake.Limited() != 1 {
		t.Errorf("fake refused %d, want 1", e.fake.Limited())
	}
}

func TestUnknownTenant(t *testing.T) {
	ts, err := gitlab.New(gitlab.Config{Tenants: []gitlab.Tenant{{ID: 7, Path: "acme", Token: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Client(jobs.GitLabTenantBase + 8); !errors.Is(err, gitlab.ErrUnknownTenant) {
		t.Errorf("unknown tenant: %v", err)
	}
	for _, bad := range []gitlab.Config{
		{BaseURL: "gitlab.com"},
		{Tenants: []gitlab.Tenant{{ID: 7, Path: "acme"}}},
		{Tenants: []gitlab.Tenant{{ID: 0, Path: "acme", Token: "x"}}},
		{Tenants: []gitlab.Tenant{{ID: 7, Path: "a", Token: "x"}, {ID: 7, Path: "b", Token: "y"}}},
	} {
		if _, err := gitlab.New(bad); err == nil {
			t.Errorf("New(%+v) accepted", bad)
		}
	}
}

// TestReviewConvergesUnderRateLimit: a round GitLab lets only a few
// calls through at a time keeps the drafts each try made, so it is
// published, once, after a few tries; a draft another head's round left
// is not published with it.
func TestReviewConvergesUnderRateLimit(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	e := setup(t, fakegitlab.Config{RequestsPerPeriod: 7, Period: time.Minute, NowFunc: func() time.Time { return now }})
	ctx := context.Background()
	comments := []forge.ReviewComment{
		{Path: "main.go", Line: 11, Side: "RIGHT", Body: "one"},
		{Path: "main.go", Line: 11, Side: "LEFT", Body: "two"},
		{Path: "main.go", Line: 10, Side: "RIGHT", Body: "three"},
		{Path: "main.go", Line: 12, Side: "RIGHT", Body: "four"},
	}
	// an earlier head's round died before its publish
	if err := e.fake.Push(proj, 3, head2, nil); err != nil {
		t.Fatal(err)
	}
	e.fake.AddDraft(proj, 3, "group_7_bot_1", "stale round body")
	const marker = "<!-- prq:review:h2 -->"
	tries := 0
	for {
		tries++
		// as the finalizer does: a round published already is not posted again
		id, err := e.client.HasReview(ctx, "acme/platform", "api", 3, marker)
		if err == nil && id == 0 {
			_, err = e.client.CreateReview(ctx, "acme/platform", "api", 3, head2, "round body"+marker, comments)
		}
		if err == nil && id != 0 {
			break
		}
		var rl *forge.RateLimitedError
		if err != nil && (!errors.As(err, &rl) || tries > 30) {
			t.Fatalf("try %d: %v", tries, err)
		}
		if rl != nil {
			now = now.Add(rl.RetryAfter)
		}
	}
	var bodies []string
	for _, n := range e.fake.Notes(proj, 3) {
		bodies = append(bodies, n.Body)
	}
	slices.Sort(bodies)
	if want := []string{"four", "one", "round body" + marker, "three", "two"}; !slices.Equal(bodies, want) {
		t.Errorf("after %d tries the notes are %q, want %q", tries, bodies, want)
	}
	if tries < 2 {
		t.Errorf("the limit never bound (%d tries): the test proves nothing", tries)
	}
}

func TestContentsOfTheDefaultBranch(t *testing.T) {
	e := setup(t, fakegitlab.Config{})
	fc, err := e.client.Contents(context.Background(), "acme/platform", "api", ".prq.yaml", "")
	if err != nil || string(fc.Content) != "language: en\n" {
		t.Errorf("default branch: %+v %v", fc, err)
	}
}

func TestCompare(t *testing.T) {
	e := setup(t, fakegitlab.Config{})
	ctx := context.Background()
	a, b := "@@ -0,0 +1 @@\n+a\n", "@@ -0,0 +1 @@\n+b\n"
	if err := e.fake.Push(proj, 3, head2, []corpus.File{{Filename: "a.go", Status: "added", Patch: &a}, {Filename: "b.go", Status: "added", Patch: &b}}); err != nil {
		t.Fatal(err)
	}
	files, err := e.client.Compare(ctx, "acme/platform", "api", head1, head2)
	if err != nil || len(files) != 2 || files[0].Status != "added" {
		t.Fatalf("compare: %+v %v", files, err)
	}
	// a comparison GitLab cut short must not pass its missing files as unchanged
	e.fake.SetCompareTimeout(proj, true)
	if _, err := e.client.Compare(ctx, "acme/platform", "api", head1, head2); !errors.Is(err, forge.ErrCompareIncomplete) {
		t.Errorf("timed-out comparison: %v, want ErrCompareIncomplete", err)
	}
}

// TestAccessLevel: a user's access level in the project comes from
// GitLab's members/all (memberships through groups included); a user
// who is no member has none.
func TestAccessLevel(t *testing.T) {
	e := setup(t, fakegitlab.Config{})
	e.fake.SetMember(proj, "maint", 40)
	e.fake.SetMember(proj, "dev", 30)
	ctx := context.Background()
	for _, tc := range []struct {
		user string
		want int
	}{{"maint", 40}, {"dev", 30}, {"stranger", 0}} {
		got, err := e.client.AccessLevel(ctx, "acme/platform", "api", e.fake.UserID(tc.user))
		if err != nil || got != tc.want {
			t.Errorf("%s: %d, %v; want %d", tc.user, got, err, tc.want)
		}
	}
	e.fake.FailNext("/members/all/", http.StatusBadGateway)
	if _, err := e.client.AccessLevel(ctx, "acme/platform", "api", e.fake.UserID("maint")); err == nil {
		t.Error("a failed members read taken as an answer")
	}
}
