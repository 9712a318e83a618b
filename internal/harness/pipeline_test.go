package harness

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/jobs"
)

// TestSameDeliveryTenTimes: GitHub redelivers; ten concurrent copies of
// one delivery make exactly one plan, one summary comment.
func TestSameDeliveryTenTimes(t *testing.T) {
	s := startStack(t, stackOpts{})
	p := testPRs(t, 1)[0]
	inst := int64(5)
	owner := "tenant-5"
	s.fakes.GitHub.AddPR(inst, owner, p.Name(), p)
	body := traffic.PullRequestEvent("opened", traffic.PR{Installation: inst, Owner: owner, Repo: p.Name(), Number: p.Number, Head: p.HeadSHA, Base: p.BaseSHA})
	codes := make(chan int, 10)
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, err := s.sender.Send(context.Background(), "pull_request", "same-delivery-guid", body)
			if err != nil {
				t.Error(err)
			}
			codes <- code
		}()
	}
	wg.Wait()
	close(codes)
	accepted := 0
	for c := range codes {
		switch c {
		case 202:
			accepted++
		case 200:
		default:
			t.Errorf("status %d", c)
		}
	}
	if accepted != 1 {
		t.Fatalf("%d deliveries accepted as new, want exactly 1", accepted)
	}
	pr := jobs.PR{Installation: inst, Owner: owner, Repo: p.Name(), Number: p.Number}
	s.waitFor("the PR published", 60*time.Second, func() bool { return s.summaryComments(pr) == 1 })
	info, err := s.app.Inspector().ListCompletedTasks(jobs.QueueFree)
	if err != nil {
		t.Fatal(err)
	}
	plans := 0
	for _, ti := range info {
		if ti.Type == jobs.TypePlan {
			plans++
		}
	}
	if plans != 1 {
		t.Fatalf("%d plan jobs ran, want 1", plans)
	}
}

// TestSynchronizeSupersedes: a new head replaces the old one's pending
// work; only changed files are reviewed again; one summary comment stays.
func TestSynchronizeSupersedes(t *testing.T) {
	s := startStack(t, stackOpts{compress: 30})
	prs := corpus.Generate(40, 3)
	var p corpus.PR
	for _, c := range prs {
		if len(c.Files) >= 4 && len(c.Files) <= 10 {
			p = c
			break
		}
	}
	p.Number = 77
	pr := s.openPR(2, jobs.TierPaid, p)
	ctx := context.Background()
	s.waitFor("the first head finalized", 60*time.Second, func() bool {
		r, err := s.app.Store().GetRun(ctx, pr)
		return err == nil && r.State == "done"
	})
	newHead := RandomHex(40)
	changed := []corpus.File{p.Files[0]}
	if err := s.fakes.GitHub.Push(pr.Owner, pr.Repo, pr.Number, newHead, changed); err != nil {
		t.Fatal(err)
	}
	body := traffic.PullRequestEvent("synchronize", traffic.PR{Installation: 2, Owner: pr.Owner, Repo: pr.Repo, Number: pr.Number, Head: newHead, Before: p.HeadSHA, Base: p.BaseSHA})
	if code, err := s.sender.Send(ctx, "pull_request", traffic.NewDelivery(), body); err != nil || code != 202 {
		t.Fatalf("synchronize: %d %v", code, err)
	}
	s.waitFor("the new head finalized", 60*time.Second, func() bool {
		r, err := s.app.Store().GetRun(ctx, pr)
		return err == nil && r.Head == newHead && r.State == "done"
	})
	r, _ := s.app.Store().GetRun(ctx, pr)
	if _, files := r.FileSummaries(); r.ReviewTotal != 1 || files != 1 || !r.Walkthrough {
		t.Fatalf("incremental review: %d reviews and %d summaries planned (walkthrough %v), want only the changed file and the pull request's walkthrough", r.ReviewTotal, files, r.Walkthrough)
	}
	if n := s.summaryComments(pr); n != 1 {
		t.Fatalf("%d summary comments after a push, want 1 (upserted)", n)
	}
	st := s.fakes.GitHub.Stats(pr.Owner, pr.Repo, pr.Number)
	if st.CommentsEdited < 1 {
		t.Fatalf("the summary was not updated for the new head: %+v", st)
	}
	c := s.fakes.GitHub.Comments(pr.Owner, pr.Repo, pr.Number)
	if !strings.Contains(c[0].Body, "prq:reviewed="+p.HeadSHA+","+newHead) {
		t.Fatalf("the marker does not record both reviewed commits:\n%s", c[0].Body)
	}
}

// TestSupersedeWhileWaiting: a push while the old head's jobs still wait
// drops them (tickets and held tasks) before they run.
func TestSupersedeWhileWaiting(t *testing.T) {
	s := startStack(t, stackOpts{compress: 1, tune: func(c *config.Config) {
		c.Models[1].TokensPerMinute = 6000 // the review model admits about one job a few seconds
	}})
	ctx := context.Background()
	p := corpus.Generate(60, 9)[0]
	for _, c := range corpus.Generate(60, 9) {
		if len(c.Files) >= 6 {
			p = c
			break
		}
	}
	p.Number = 88
	pr := s.openPR(1, jobs.TierPaid, p)
	s.waitFor("the plan", 20*time.Second, func() bool {
		r, err := s.app.Store().GetRun(ctx, pr)
		return err == nil && r.Head == p.HeadSHA
	})
	newHead := RandomHex(40)
	s.fakes.GitHub.Push(pr.Owner, pr.Repo, pr.Number, newHead, nil)
	body := traffic.PullRequestEvent("synchronize", traffic.PR{Installation: 1, Owner: pr.Owner, Repo: pr.Repo, Number: pr.Number, Head: newHead, Before: p.HeadSHA})
	if code, _ := s.sender.Send(ctx, "pull_request", traffic.NewDelivery(), body); code != 202 {
		t.Fatalf("synchronize: %d", code)
	}
	s.waitFor("old head's held review jobs dropped", 20*time.Second, func() bool {
		ids, _ := s.app.Store().TaskIDs(ctx, pr, p.HeadSHA)
		for _, id := range ids {
			if info, err := s.app.Inspector().GetTaskInfo(jobs.QueuePaid, id); err == nil && info.State.String() == "scheduled" {
				return false
			}
		}
		return true
	})
}

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHTTPSurface(t *testing.T) {
	s := startStack(t, stackOpts{})
	base := "http://" + s.app.ListenAddr()
	token := string(s.app.Config().Admin.Token)
	for _, path := range []string{"/", "/api/dashboard", "/api/plans", "/monitoring/"} {
		if code, _ := get(t, base+path, ""); code != 401 {
			t.Errorf("%s without auth: %d, want 401", path, code)
		}
		if code, _ := get(t, base+path, "wrong"); code != 401 {
			t.Errorf("%s with a wrong token: %d, want 401", path, code)
		}
		if code, _ := get(t, base+path, token); code != 200 {
			t.Errorf("%s with the token: %d, want 200", path, code)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _ := get(t, base+path, ""); code != 200 {
			t.Errorf("%s: %d", path, code)
		}
	}
	runE2E(t, s, 3)
	code, body := get(t, base+"/metrics", "")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	for _, name := range []string{"prq_webhook_deliveries_total", "prq_llm_calls_total", "prq_admitted_jobs_total", "prq_admission_wait_seconds",
		"prq_admission_backlog_jobs", "prq_admission_incoming_tokens_total", "prq_admission_admitted_tokens_total",
		"prq_admission_ahead_of_fifo_tokens_total", "prq_bucket_available_tokens", "prq_bucket_limit_tokens_per_second", "prq_model_paused", "prq_queue_tasks"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if strings.Contains(body, string(s.app.Config().OpenAI.APIKey)) {
		t.Fatal("the API key is in /metrics")
	}
	code, body = get(t, base+"/api/dashboard", token)
	if code != 200 || !strings.Contains(body, `"classes"`) || !strings.Contains(body, `"series"`) {
		t.Fatalf("/api/dashboard: %d %s", code, body)
	}
}

// TestDeletedPRDroppedCleanly: a PR GitHub answers 404 for is dropped
// with one log line, not retried forever.
func TestDeletedPRDroppedCleanly(t *testing.T) {
	s := startStack(t, stackOpts{})
	body := traffic.PullRequestEvent("opened", traffic.PR{Installation: 4, Owner: "tenant-4", Repo: "gone", Number: 9, Head: RandomHex(40), Base: RandomHex(40)})
	if code, err := s.sender.Send(context.Background(), "pull_request", traffic.NewDelivery(), body); err != nil || code != 202 {
		t.Fatalf("webhook: %d %v", code, err)
	}
	s.waitFor("the plan job to finish", 20*time.Second, func() bool {
		done, _ := s.app.Inspector().ListCompletedTasks(jobs.QueueFree)
		return len(done) == 1
	})
	if n := strings.Count(s.logs.String(), "pull request is gone"); n != 1 {
		t.Fatalf("%d log lines about the deleted PR, want 1", n)
	}
	if st := s.fakes.GitHub.AllStats(); len(st) != 0 {
		t.Fatalf("something was written for a deleted PR: %+v", st)
	}
}

// TestDashboardDisabled: with dashboard.disabled, serve mounts no
// dashboard (page and data) and runs no sampler; the admin API, the web
// UI and metrics stay.
func TestDashboardDisabled(t *testing.T) {
	s := startStack(t, stackOpts{tune: func(c *config.Config) { c.Dashboard.Disabled = true }})
	base := "http://" + s.app.ListenAddr()
	token := string(s.app.Config().Admin.Token)
	for path, want := range map[string]int{"/": 404, "/api/dashboard": 404, "/api/plans": 200, "/monitoring/": 200, "/metrics": 200, "/healthz": 200} {
		if code, _ := get(t, base+path, token); code != want {
			t.Errorf("%s: %d, want %d", path, code, want)
		}
	}
	if code, _ := get(t, base+"/api/plans", ""); code != 401 {
		t.Errorf("/api/plans without auth: %d, want 401", code)
	}
	if strings.Contains(s.logs.String(), "prq: dashboard") {
		t.Errorf("serve announced a dashboard it does not serve:\n%s", s.logs.String())
	}
}
