package fakegithub_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/ghapp"
)

// TestBodyLimits: GitHub refuses bodies over 65,536 characters with 422;
// exactly the limit is taken (characters, not bytes).
func TestBodyLimits(t *testing.T) {
	fake, app, _ := setup(t, fakegithub.Config{WritesPerPeriod: -1}, "/")
	pr := bigPR(2)
	fake.AddPR(1, "", "", pr)
	c, _ := app.Client(1)
	ctx := context.Background()
	ok := strings.Repeat("é", fakegithub.MaxBodyChars) // 2 bytes each: the limit counts characters
	over := ok + "x"
	if _, err := c.Comment(ctx, "acme", "big", 7, ok); err != nil {
		t.Fatalf("a comment of exactly the limit: %v", err)
	}
	if _, err := c.Comment(ctx, "acme", "big", 7, over); !errors.Is(err, ghapp.ErrUnprocessable) || !strings.Contains(err.Error(), "body is too long (maximum is 65536 characters)") {
		t.Fatalf("an over-long comment: %v, want 422 with GitHub's message", err)
	}
	if _, err := c.UpsertComment(ctx, "acme", "big", 7, 0, "<!-- m -->", over); !errors.Is(err, ghapp.ErrUnprocessable) {
		t.Fatalf("an over-long upsert: %v", err)
	}
	if _, err := c.CreateReview(ctx, "acme", "big", 7, pr.HeadSHA, over, nil); !errors.Is(err, ghapp.ErrUnprocessable) {
		t.Fatalf("an over-long review body: %v", err)
	}
	if _, err := c.CreateReview(ctx, "acme", "big", 7, pr.HeadSHA, "ok", []ghapp.ReviewComment{{Path: "f0000.go", Line: 1, Side: "RIGHT", Body: over}}); !errors.Is(err, ghapp.ErrUnprocessable) {
		t.Fatalf("an over-long review comment: %v", err)
	}
	if got := fake.Stats("acme", "big", 7).Rejected; got != 4 {
		t.Fatalf("rejected = %d, want 4", got)
	}
}

func TestCheckRuns(t *testing.T) {
	fake, app, clk := setup(t, fakegithub.Config{WritesPerPeriod: -1}, "/")
	pr := bigPR(1)
	fake.AddPR(1, "", "", pr)
	c, _ := app.Client(1)
	ctx := context.Background()
	id, err := c.CreateCheckRun(ctx, "acme", "big", ghapp.CheckRun{Name: "prq", HeadSHA: pr.HeadSHA, Status: "queued", Title: "queued", Summary: "0 of 1 files"})
	if err != nil {
		t.Fatal(err)
	}
	clk.add(3e9)
	if err := c.UpdateCheckRun(ctx, "acme", "big", id, ghapp.CheckRun{Name: "prq", Status: "in_progress", Title: "reviewing", Summary: "1 of 1 files"}); err != nil {
		t.Fatal(err)
	}
	if err := c.UpdateCheckRun(ctx, "acme", "big", id, ghapp.CheckRun{Name: "prq", Status: "completed"}); !errors.Is(err, ghapp.ErrUnprocessable) {
		t.Fatalf("completed without a conclusion: %v, want 422", err)
	}
	if err := c.UpdateCheckRun(ctx, "acme", "big", id, ghapp.CheckRun{Name: "prq", Status: "completed", Conclusion: "success", Title: "done", Summary: strings.Repeat("x", fakegithub.MaxCheckOutputChars+1)}); !errors.Is(err, ghapp.ErrUnprocessable) {
		t.Fatalf("an over-long summary: %v, want 422", err)
	}
	if err := c.UpdateCheckRun(ctx, "acme", "big", id, ghapp.CheckRun{Name: "prq", Status: "completed", Conclusion: "success", Title: "done", Summary: "reviewed"}); err != nil {
		t.Fatal(err)
	}
	if err := c.UpdateCheckRun(ctx, "acme", "big", id, ghapp.CheckRun{Status: "completed", Conclusion: "success"}); !errors.Is(err, ghapp.ErrUnprocessable) {
		t.Fatalf("a blank name: %v, want 422", err)
	}
	if got, err := c.FindCheckRun(ctx, "acme", "big", pr.HeadSHA, "prq"); err != nil || got != id {
		t.Fatalf("find = %d %v, want %d", got, err, id)
	}
	if _, err := c.CreateCheckRun(ctx, "acme", "big", ghapp.CheckRun{Name: "prq", HeadSHA: strings.Repeat("c", 40)}); !errors.Is(err, ghapp.ErrUnprocessable) {
		t.Fatalf("unknown commit: %v, want 422", err)
	}
	runs := fake.CheckRuns("acme", "big", pr.HeadSHA)
	if len(runs) != 1 {
		t.Fatalf("%d runs", len(runs))
	}
	var states []string
	for _, h := range runs[0].History {
		states = append(states, h.Status)
	}
	if got := strings.Join(states, ","); got != "queued,in_progress,completed" {
		t.Fatalf("history %s", got)
	}
	if runs[0].Conclusion != "success" || runs[0].History[1].At.Sub(runs[0].History[0].At) < 3e9 {
		t.Fatalf("run %+v", runs[0])
	}
}

func TestCheckRunsNeedPermission(t *testing.T) {
	fake, app, _ := setup(t, fakegithub.Config{Permissions: map[string]string{"pull_requests": "write", "issues": "write"}}, "/")
	pr := bigPR(1)
	fake.AddPR(1, "", "", pr)
	c, _ := app.Client(1)
	if _, err := c.CreateCheckRun(context.Background(), "acme", "big", ghapp.CheckRun{Name: "prq", HeadSHA: pr.HeadSHA}); !errors.Is(err, ghapp.ErrForbidden) {
		t.Fatalf("without checks: write: %v, want 403", err)
	}
}
