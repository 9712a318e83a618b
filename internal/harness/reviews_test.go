package harness

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// The tests here drive the whole pipeline (webhook, plan, admission, file
// jobs, finalize, check runs) against the fakes and read what landed on
// the fake GitHub, which refuses what GitHub refuses (bodies over 65,536
// characters, lines outside the diff) with GitHub's 422.

// published is what GitHub holds for one head of a pull request.
type published struct {
	pr       jobs.PR
	head     string
	run      store.Run
	summary  []fakegithub.IssueComment // the summary's parts, part 1 first
	reviews  []fakegithub.Review       // the App's reviews of head
	comments []fakegithub.ReviewComment
	check    fakegithub.CheckRun
	stats    fakegithub.PRStats
}

// summaryText is the summary's parts joined.
func (p published) summaryText() string {
	var b strings.Builder
	for _, c := range p.summary {
		b.WriteString(c.Body)
	}
	return b.String()
}

// reviewBody is the head's review body ("" without one; published
// reports that).
func (p published) reviewBody() string {
	if len(p.reviews) == 0 {
		return ""
	}
	return p.reviews[0].Body
}

// waitDone waits until every PR's current head is finalized.
func (s *stack) waitDone(prs []jobs.PR, timeout time.Duration) {
	s.t.Helper()
	ctx := context.Background()
	s.waitFor(fmt.Sprintf("%d PRs finalized", len(prs)), timeout, func() bool {
		for _, pr := range prs {
			if run, err := s.app.Store().GetRun(ctx, pr); err != nil || run.State != store.StateDone {
				return false
			}
		}
		return true
	})
	time.Sleep(300 * time.Millisecond) // let a duplicate or a late write show itself
}

// published reads what GitHub holds for pr's current head and checks
// what holds for every reviewed head whatever the model did: exactly one
// summary (its parts each upserted once, in order) and exactly one
// review, every body within GitHub's limit, nothing refused or posted
// twice, and one check run that went queued → in progress → completed
// with its progress updates paced.
func (s *stack) published(pr jobs.PR) published {
	t := s.t
	t.Helper()
	run, err := s.app.Store().GetRun(context.Background(), pr)
	if err != nil {
		t.Fatal(err)
	}
	gh := s.fakes.GitHub
	p := published{pr: pr, head: run.Head, run: run, stats: gh.Stats(pr.Owner, pr.Repo, pr.Number)}
	parts := map[int]fakegithub.IssueComment{}
	for _, c := range gh.Comments(pr.Owner, pr.Repo, pr.Number) {
		if utf8.RuneCountInString(c.Body) > fakegithub.MaxBodyChars {
			t.Errorf("%s: comment %d has %d characters, over GitHub's %d", pr, c.ID, utf8.RuneCountInString(c.Body), fakegithub.MaxBodyChars)
		}
		var part int
		if i := strings.Index(c.Body, "<!-- prq:summary part="); i >= 0 {
			fmt.Sscanf(c.Body[i:], "<!-- prq:summary part=%d ", &part)
			if _, dup := parts[part]; dup {
				t.Errorf("%s: summary part %d posted twice", pr, part)
			}
			parts[part] = c
		}
	}
	if n := s.summaryComments(pr); n != 1 {
		t.Errorf("%s: %d summary comments (marker %q), want exactly 1", pr, n, workers.SummaryMarker)
	}
	for i := 1; i <= len(parts); i++ {
		c, ok := parts[i]
		if !ok {
			t.Errorf("%s: summary parts %v lack part %d", pr, len(parts), i)
			continue
		}
		p.summary = append(p.summary, c)
	}
	for _, r := range gh.Reviews(pr.Owner, pr.Repo, pr.Number) {
		if r.Author == gh.Bot() && r.CommitID == run.Head {
			p.reviews = append(p.reviews, r)
		}
		if utf8.RuneCountInString(r.Body) > fakegithub.MaxBodyChars {
			t.Errorf("%s: review %d has %d characters, over GitHub's %d", pr, r.ID, utf8.RuneCountInString(r.Body), fakegithub.MaxBodyChars)
		}
	}
	if run.ReviewTotal > 0 && len(p.reviews) != 1 {
		t.Errorf("%s: %d reviews of head %s, want exactly 1", pr, len(p.reviews), run.Head[:7])
	}
	for _, c := range gh.ReviewComments(pr.Owner, pr.Repo, pr.Number) {
		if c.Author == gh.Bot() {
			p.comments = append(p.comments, c)
		}
	}
	if p.stats.Rejected != 0 || p.stats.Duplicates != 0 {
		t.Errorf("%s: %+v: GitHub refused %d writes and saw %d duplicates, want none", pr, p.stats, p.stats.Rejected, p.stats.Duplicates)
	}
	checks := gh.CheckRuns(pr.Owner, pr.Repo, run.Head)
	if len(checks) != 1 {
		t.Errorf("%s: %d check runs on head %s, want exactly 1", pr, len(checks), run.Head[:7])
		return p
	}
	p.check = checks[0]
	checkLifecycle(t, pr, p.check, s.checkEvery)
	return p
}

// checkLifecycle checks a check run went queued → in progress →
// completed, never back, with its progress updates at least every
// apart (less up to a second's slack: an update reaches GitHub after its turn
// in the installation's write lane, which can take a moment).
func checkLifecycle(t *testing.T, pr jobs.PR, c fakegithub.CheckRun, every time.Duration) {
	t.Helper()
	rank := map[string]int{"queued": 0, "in_progress": 1, "completed": 2}
	h := c.History
	if len(h) == 0 || h[0].Status != "queued" {
		t.Errorf("%s: check run does not start queued: %+v", pr, h)
		return
	}
	if last := h[len(h)-1]; last.Status != "completed" || last.Conclusion == "" || c.Status != "completed" {
		t.Errorf("%s: check run does not end completed with a conclusion: %+v", pr, h)
	}
	var progress []time.Time
	for i, st := range h {
		if i > 0 && rank[st.Status] < rank[h[i-1].Status] {
			t.Errorf("%s: check run went back from %s to %s: %+v", pr, h[i-1].Status, st.Status, h)
		}
		if st.Status == "in_progress" {
			progress = append(progress, st.At)
		}
	}
	slack := min(time.Second, every/2)
	for i := 1; i < len(progress); i++ {
		if gap := progress[i].Sub(progress[i-1]); gap < every-slack {
			t.Errorf("%s: progress updates %d and %d only %s apart, want at least %s", pr, i, i+1, gap.Round(time.Millisecond), every)
		}
	}
}

// metric reads a counter or gauge from /metrics, summed over the series whose
// labels include want.
func (s *stack) metric(name string, want map[string]string) float64 {
	s.t.Helper()
	code, body := get(s.t, "http://"+s.app.ListenAddr()+"/metrics", "")
	if code != 200 {
		s.t.Fatalf("/metrics: %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		s.t.Fatalf("/metrics does not parse: %v", err)
	}
	var sum float64
	fam, ok := fams[name]
	if !ok {
		return 0 // a counter vector without series is not listed
	}
	for _, m := range fam.GetMetric() {
		match := 0
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
				match++
			}
		}
		if match == len(want) {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() // whichever it is
		}
	}
	return sum
}

// admitted is how many requests the fake provider answered for model
// (not refused with 429).
func (s *stack) admitted(model string) int64 {
	st := s.fakes.OpenAI.Stats()[model]
	return st.Requests - st.RateLimited
}

// reviewAll opens n corpus-sized PRs on the paid tier (every file
// reviewed) with the provider answering in style, waits until each is
// finalized and returns what landed.
func reviewAll(t *testing.T, style fakeopenai.ReplyStyle, n int, tune func(*config.Config)) (*stack, []published) {
	t.Helper()
	s := startStack(t, stackOpts{tune: tune})
	s.fakes.OpenAI.SetReplies(style)
	var prs []jobs.PR
	for i, p := range testPRs(t, n) {
		prs = append(prs, s.openPR(int64(i+1), jobs.TierPaid, p))
	}
	s.waitDone(prs, 90*time.Second)
	var out []published
	for _, pr := range prs {
		out = append(out, s.published(pr))
	}
	return s, out
}

// reviewJobs is the review jobs planned for the heads.
func reviewJobs(ps []published) int {
	n := 0
	for _, p := range ps {
		n += p.run.ReviewTotal
	}
	return n
}

// TestReplyJSON: the model answers with the bare JSON asked for; every
// head gets one summary and one review with line comments.
func TestReplyJSON(t *testing.T) {
	t.Parallel()
	s, ps := reviewAll(t, fakeopenai.ReplyJSON, 3, nil)
	lines := 0
	for _, p := range ps {
		lines += len(p.comments)
		if strings.Contains(p.summaryText(), "review failed") {
			t.Errorf("%s: a review failed on well-formed replies:\n%s", p.pr, p.summaryText())
		}
	}
	if lines == 0 {
		t.Error("no line comment landed")
	}
	if u := s.metric("prq_llm_unusable_replies_total", nil); u != 0 {
		t.Errorf("%v unusable replies counted for well-formed ones", u)
	}
	// what a reviewed PR looks like (docs/reviews.md's example comes from here)
	p := ps[0]
	for _, q := range ps {
		if q.run.ReviewTotal > p.run.ReviewTotal {
			p = q
		}
	}
	t.Logf("%s: %d review jobs, %d line comments\n--- summary comment ---\n%s\n--- review body ---\n%s\n--- check run: %s / %s ---\n%s\n%s",
		p.pr, p.run.ReviewTotal, len(p.comments), p.summaryText(), p.reviewBody(), p.check.Status, p.check.Conclusion, p.check.Title, p.check.Summary)
}

// TestReplyProse: a model that answers in prose unless response_format
// asks for JSON. The default models get strict structured output
// (json_schema), so the reviews land with their line comments and no
// reply is unusable.
func TestReplyProse(t *testing.T) {
	t.Parallel()
	s, ps := reviewAll(t, fakeopenai.ReplyProse, 3, nil)
	review := s.app.Config().Jobs.ReviewModel
	st := s.fakes.OpenAI.Stats()[review]
	if st.Requests == 0 || st.ResponseFormats["json_schema"] != st.Requests {
		t.Errorf("%s: %d requests, response formats %v: want json_schema on every review call", review, st.Requests, st.ResponseFormats)
	}
	lines := 0
	for _, p := range ps {
		lines += len(p.comments)
		if strings.Contains(p.summaryText(), "review failed") {
			t.Errorf("%s: a review failed although structured output was asked for:\n%s", p.pr, p.summaryText())
		}
	}
	if lines == 0 {
		t.Error("no line comment landed: prose was taken for a review")
	}
	if u := s.metric("prq_llm_unusable_replies_total", nil); u != 0 {
		t.Errorf("%v unusable replies with structured output", u)
	}
	t.Logf("%d review calls (%v), %d line comments", st.Requests, st.ResponseFormats, lines)
}

// TestReplyFenced: with the text output format (no response_format),
// the model wraps its JSON in a fence with prose around it and a `{}`
// quoted from the code before it; the review is read from the fence,
// not taken as the empty `{}`.
func TestReplyFenced(t *testing.T) {
	t.Parallel()
	s, ps := reviewAll(t, fakeopenai.ReplyFenced, 3, func(c *config.Config) {
		for i := range c.Models {
			if c.Models[i].Name == c.Jobs.ReviewModel {
				c.Models[i].OutputFormat = "text"
			}
		}
	})
	review := s.app.Config().Jobs.ReviewModel
	st := s.fakes.OpenAI.Stats()[review]
	if st.ResponseFormats["none"] != st.Requests {
		t.Errorf("%s: response formats %v: the text format sends none", review, st.ResponseFormats)
	}
	for _, p := range ps {
		if len(p.comments) == 0 {
			t.Errorf("%s: no line comment landed: the quoted {} was taken for the review", p.pr)
		}
		if strings.Contains(p.summaryText(), "review failed") {
			t.Errorf("%s: a fenced reply could not be read:\n%s", p.pr, p.summaryText())
		}
	}
	if u := s.metric("prq_llm_unusable_replies_total", nil); u != 0 {
		t.Errorf("%v unusable replies for fenced JSON", u)
	}
	if calls := s.admitted(review); calls != int64(reviewJobs(ps)) {
		t.Errorf("%d review calls for %d review jobs, want one each", calls, reviewJobs(ps))
	}
}

// TestReplyLoose: the model answers in the shape asked for but adds
// fields of its own to each comment (path, severity, suggestion), a
// top-level verdict, line numbers as strings and findings for comments,
// as servers that accept a schema without enforcing it do. Every review
// lands with its line comments in one call per job; nothing is counted
// unusable, and the fields read past are counted.
func TestReplyLoose(t *testing.T) {
	t.Parallel()
	s, ps := reviewAll(t, fakeopenai.ReplyLoose, 3, nil)
	review := s.app.Config().Jobs.ReviewModel
	lines := 0
	for _, p := range ps {
		lines += len(p.comments)
		if len(p.comments) == 0 && p.run.ReviewTotal > 0 {
			t.Errorf("%s: no line comment landed from %d loose replies", p.pr, p.run.ReviewTotal)
		}
		if strings.Contains(p.summaryText(), "review failed") {
			t.Errorf("%s: a loose reply was taken for unreadable:\n%s", p.pr, p.summaryText())
		}
	}
	if u := s.metric("prq_llm_unusable_replies_total", nil); u != 0 {
		t.Errorf("%v unusable replies counted for loose ones", u)
	}
	if calls := s.admitted(review); calls != int64(reviewJobs(ps)) {
		t.Errorf("%d review calls for %d review jobs, want one each (no repair)", calls, reviewJobs(ps))
	}
	ignored := s.metric("prq_llm_reply_ignored_fields_total", map[string]string{"model": review})
	if ignored < float64(reviewJobs(ps)) {
		t.Errorf("prq_llm_reply_ignored_fields_total{model=%q} = %v, want at least one per review job (%d)", review, ignored, reviewJobs(ps))
	}
	t.Logf("%d review jobs, %d line comments, %v ignored fields counted", reviewJobs(ps), lines, ignored)
}

// TestReplyOutside: each reply cites lines in the diff and one far
// outside it; the far one goes to the review body under its file's name,
// never onto a hunk (the fake GitHub would refuse it with 422 anyway).
func TestReplyOutside(t *testing.T) {
	t.Parallel()
	_, ps := reviewAll(t, fakeopenai.ReplyOutside, 3, nil)
	const far = "far outside the diff"
	for _, p := range ps {
		if len(p.comments) == 0 {
			t.Errorf("%s: no line comment landed", p.pr)
		}
		for _, c := range p.comments {
			if strings.Contains(c.Body, far) {
				t.Errorf("%s: the far finding was put on %s line %d", p.pr, c.Path, c.Line)
			}
		}
		if body := p.reviewBody(); body != "" {
			if got := strings.Count(body, far); got < p.run.ReviewTotal {
				t.Errorf("%s: %d far findings in the review body, want one per reviewed file (%d):\n%s", p.pr, got, p.run.ReviewTotal, body)
			}
		}
	}
	t.Logf("review body of %s:\n%s", ps[0].pr, ps[0].reviewBody())
}

// TestReplyCut: every review reply is cut off. Each is counted as
// unusable, asked for once more through admission (two calls per review
// job, never more), and shown as failed in the summary, the review and
// the check run: never as a clean file.
func TestReplyCut(t *testing.T) {
	t.Parallel()
	s, ps := reviewAll(t, fakeopenai.ReplyCut, 2, nil)
	review := s.app.Config().Jobs.ReviewModel
	jobsN := reviewJobs(ps)
	if calls := s.admitted(review); calls != int64(2*jobsN) {
		t.Errorf("%d review calls for %d review jobs, want 2 each (one repair attempt)", calls, jobsN)
	}
	if u := s.metric("prq_llm_unusable_replies_total", map[string]string{"model": review, "kind": "review"}); u != float64(2*jobsN) {
		t.Errorf("prq_llm_unusable_replies_total = %v, want %d (both replies of each job)", u, 2*jobsN)
	}
	// every process's calls, from Redis: the scrape sends this
	// process's deferred counts first
	if n := s.metric("prq_llm_calls_all_total", map[string]string{"model": review, "outcome": "unusable"}); n != float64(2*jobsN) {
		t.Errorf("the dashboard's calls hash counts %v unusable replies, want %d", n, 2*jobsN)
	}
	for _, p := range ps {
		sum := p.summaryText()
		if got := strings.Count(sum, "review failed: the model"); got != p.run.ReviewTotal {
			t.Errorf("%s: %d files shown as failed, want %d:\n%s", p.pr, got, p.run.ReviewTotal, sum)
		}
		if strings.Contains(sum, "no problems found") {
			t.Errorf("%s: a failed review is shown as clean in the summary:\n%s", p.pr, sum)
		}
		if len(p.comments) != 0 {
			t.Errorf("%s: %d line comments from unreadable replies", p.pr, len(p.comments))
		}
		if strings.Contains(p.reviewBody(), "no problems found") {
			t.Errorf("%s: the review calls a head whose reviews failed clean:\n%s", p.pr, p.reviewBody())
		}
		if p.check.Conclusion == "success" {
			t.Errorf("%s: check run %q concluded success with every review failed", p.pr, p.check.Title)
		}
	}
	t.Logf("%d review jobs, %d calls\n--- summary comment ---\n%s\n--- review body ---\n%s\n--- check run: %s ---\n%s",
		jobsN, s.admitted(review), ps[0].summaryText(), ps[0].reviewBody(), ps[0].check.Conclusion, ps[0].check.Summary)
}

// largePR is one PR of n generated files (valid unified diffs) under
// distinct paths, each with a small patch: the point is the number of
// files, and small patches keep the test quick.
func largePR(n int, seed int64) corpus.PR {
	p := corpus.PR{Repo: "acme/monorepo", Number: 300, Title: "Rename the queue packages", Body: "A large mechanical refactor.",
		HeadSHA: RandomHex(40), BaseSHA: RandomHex(40)}
	for _, g := range corpus.Generate(20*n, seed) {
		for _, f := range g.Files {
			if len(p.Files) < n && f.Patch != nil && len(*f.Patch) < 600 {
				f.Filename = fmt.Sprintf("services/team-%03d/internal/%s", len(p.Files), f.Filename)
				p.Files = append(p.Files, f)
			}
		}
	}
	return p
}

// largeLimits lets big PRs through the compressed limits in seconds: a
// 100 kB file's review is over the demo's tokens per period.
func largeLimits(c *config.Config) {
	for i := range c.Models {
		c.Models[i].RequestsPerMinute *= 4
		c.Models[i].TokensPerMinute = 600000
	}
}

// TestLargestPRs: the corpus's largest PR (70 files) and a generated
// 300-file PR publish a summary (in parts where one comment cannot hold
// it) and a review, every body within GitHub's limit, against a fake
// GitHub that refuses more.
func TestLargestPRs(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: 900 file jobs")
	}
	t.Parallel()
	wd, _ := os.Getwd()
	path := corpus.Find(wd)
	if path == "" {
		t.Log("the shared corpus (../shared/fixtures/pr-corpus) is absent: only the generated 300-file PR runs")
	}
	s := startStack(t, stackOpts{tune: largeLimits})
	var prs []jobs.PR
	var files []int
	if path != "" {
		all, err := corpus.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		sort.SliceStable(all, func(i, j int) bool { return len(all[i].Files) > len(all[j].Files) })
		big := all[0]
		t.Logf("largest corpus PR: %s#%d, %d files", big.Repo, big.Number, len(big.Files))
		prs = append(prs, s.openPR(1, jobs.TierPaid, big))
		files = append(files, len(big.Files))
	}
	gen := largePR(300, 14)
	prs = append(prs, s.openPR(2, jobs.TierPaid, gen))
	files = append(files, len(gen.Files))
	s.waitDone(prs, 150*time.Second)
	for i, pr := range prs {
		p := s.published(pr)
		longest := 0
		for _, c := range p.summary {
			longest = max(longest, utf8.RuneCountInString(c.Body))
		}
		review := ""
		if len(p.reviews) == 1 {
			review = fmt.Sprintf("review body %d chars, %d line comments", utf8.RuneCountInString(p.reviews[0].Body), len(p.comments))
		}
		t.Logf("%s: %d files, %d review jobs: summary in %d parts (longest %d chars), %s; check run %s: %s",
			pr, files[i], p.run.ReviewTotal, len(p.summary), longest, review, p.check.Conclusion, p.check.Title)
		if len(p.comments) == 0 || len(p.comments) > workers.MaxReviewComments {
			t.Errorf("%s: %d line comments, want 1 to %d", pr, len(p.comments), workers.MaxReviewComments)
		}
	}
	// the generated PR's summary cannot fit one comment: it continues,
	// and every file is listed in one of its parts
	last := s.published(prs[len(prs)-1])
	if len(last.summary) < 2 {
		t.Errorf("the 300-file PR's summary is in %d part(s); at this size it must continue in further comments", len(last.summary))
	}
	text := last.summaryText()
	for _, f := range gen.Files {
		if !strings.Contains(text, f.Filename) {
			t.Errorf("the 300-file PR's summary does not list %s", f.Filename)
			break
		}
	}
}

// bigFile is a PR with one small file and one whose patch is far over
// what the review model's context holds.
func bigFile() corpus.PR {
	var small, big *corpus.File
	for _, g := range corpus.Generate(400, 21) {
		for i := range g.Files {
			f := g.Files[i]
			switch n := len(ptrOr(f.Patch)); {
			case big == nil && n > 6000 && n < 10000:
				big = &f
			case small == nil && n > 300 && n < 1500:
				small = &f
			}
		}
	}
	return corpus.PR{Repo: "acme/queue", Number: 51, Title: "Rework the scheduler", Body: "Splits the scheduler loop.", HeadSHA: RandomHex(40), BaseSHA: RandomHex(40),
		Files: []corpus.File{*small, *big}}
}

func ptrOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestFileLargerThanContext: a file whose patch is several times the
// review model's context is reviewed in several calls, each within the
// context (the fake provider refuses longer ones as OpenAI does), and the
// findings of every part reach the review on their own lines.
func TestFileLargerThanContext(t *testing.T) {
	t.Parallel()
	const contextTokens = 2000
	s := startStack(t, stackOpts{tune: func(c *config.Config) {
		for i := range c.Models {
			if c.Models[i].Name == c.Jobs.ReviewModel {
				c.Models[i].ContextTokens = contextTokens
			}
		}
	}})
	p := bigFile()
	big := p.Files[1]
	pr := s.openPR(1, jobs.TierPaid, p)
	s.waitDone([]jobs.PR{pr}, 90*time.Second)
	pub := s.published(pr)
	results, err := s.app.Store().Results(context.Background(), pr, pub.head)
	if err != nil {
		t.Fatal(err)
	}
	// each part's findings, by part
	type span struct{ lo, hi, n int }
	parts := map[int]*span{}
	total := 0
	for _, r := range results {
		if r.Kind != jobs.KindReview || r.Path != big.Filename {
			continue
		}
		total = r.Parts
		if r.Failed || r.Skipped != "" {
			t.Errorf("part %d of %d: %s", r.Part, r.Parts, r.Skipped)
		}
		sp := &span{lo: 1 << 30}
		for _, c := range r.Comments {
			sp.lo, sp.hi = min(sp.lo, c.Line), max(sp.hi, c.Line)
			sp.n++
		}
		parts[r.Part] = sp
	}
	review := s.app.Config().Jobs.ReviewModel
	t.Logf("%s: %d-character patch reviewed in %d parts with a %d-token context; %d review calls; %d line comments",
		big.Filename, len(*big.Patch), total, contextTokens, s.admitted(review), len(pub.comments))
	if total < 2 || len(parts) != total {
		t.Fatalf("the big file was reviewed in %d parts (%d results), want several", total, len(parts))
	}
	reviews := 0 // every part of either file, each reviewed once
	for _, r := range results {
		if r.Kind == jobs.KindReview {
			reviews++
		}
	}
	if calls := s.admitted(review); calls != int64(reviews) || reviews < total+1 {
		t.Errorf("%d review calls, want %d (one per part of the big file and of the small one)", calls, reviews)
	}
	if st := s.fakes.OpenAI.Stats()[review]; st.Faults != 0 {
		t.Errorf("%d faults", st.Faults)
	}
	// every part's findings sit in its own stretch of the file, and each
	// reached the review as a line comment on that line
	on := map[int]bool{}
	for _, c := range pub.comments {
		if c.Path == big.Filename {
			on[c.Line] = true
		}
	}
	prevHi := 0
	for k := 1; k <= total; k++ {
		sp := parts[k]
		if sp.n == 0 {
			t.Errorf("part %d made no finding", k)
			continue
		}
		if sp.lo <= prevHi {
			t.Errorf("part %d's findings (lines %d-%d) overlap the previous part's (up to %d)", k, sp.lo, sp.hi, prevHi)
		}
		prevHi = sp.hi
		if !on[sp.lo] || !on[sp.hi] {
			t.Errorf("part %d's findings on lines %d and %d did not reach the review", k, sp.lo, sp.hi)
		}
	}
	if !strings.Contains(pub.summaryText(), fmt.Sprintf("reviewed in %d parts", total)) {
		t.Errorf("the summary does not say the file was reviewed in %d parts:\n%s", total, pub.summaryText())
	}
}

// TestCheckRunProgress: with a slow review model, a PR's check run shows
// several progress updates between queued and completed, paced at least
// github.check_run_every apart (1 s here: at the default 5 s a run that
// finishes in ~10 s on a loaded machine has room for one).
func TestCheckRunProgress(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{tune: func(c *config.Config) { c.GitHub.CheckRunEvery = config.Duration(time.Second) }})
	s.fakes.OpenAI.SetLatencyScale(1) // the review model's real seconds (3 to 13 s): files finish over ~10 s
	var p corpus.PR
	for _, c := range testPRs(t, 40) {
		if len(c.Files) >= 8 {
			p = c
			break
		}
	}
	if p.Files == nil {
		p = largePR(10, 5)
	}
	pr := s.openPR(1, jobs.TierPaid, p)
	s.waitDone([]jobs.PR{pr}, 90*time.Second)
	pub := s.published(pr)
	if len(pub.check.History) == 0 || len(pub.summary) == 0 {
		t.Fatal("no check run or no summary")
	}
	var states []string
	start := pub.check.History[0].At
	progress := 0
	for _, h := range pub.check.History {
		states = append(states, fmt.Sprintf("%s@%.1fs", h.Status, h.At.Sub(start).Seconds()))
		if h.Status == "in_progress" {
			progress++
		}
	}
	t.Logf("%s: %d files; check run: %s; final %q: %s", pr, len(p.Files), strings.Join(states, " → "), pub.check.Title, pub.check.Summary)
	if progress < 2 {
		t.Errorf("%d progress updates over the run, want several (paced, not none)", progress)
	}
	if !strings.Contains(pub.check.Summary, fmt.Sprintf("#issuecomment-%d", pub.summary[0].ID)) {
		t.Errorf("the completed check run does not link the summary comment: %q", pub.check.Summary)
	}
}
