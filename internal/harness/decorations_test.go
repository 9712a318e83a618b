package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/jobs"
)

// TestDecorationFailuresNeverBlock: with GitHub's check-runs endpoints
// answering 403 (a permission the App lacks), 404 (an API that is not
// there: an Enterprise Server or a proxy without it), 422 or 500, every
// pull request still gets exactly one summary and one review, posted
// before any completion of its check run is tried, with no summary edit
// (as many as with check runs working: none); every finalize completes
// (no task left to retry, nothing archived, no given-up count); the
// failures are counted by kind and status, and the check-run requests
// stay bounded.
func TestDecorationFailuresNeverBlock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int // 0: check runs work
	}{
		{"working", 0},
		{"403", 403},
		{"404", 404},
		{"422", 422},
		{"500", 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startStack(t, stackOpts{})
			gh := s.fakes.GitHub
			gh.RecordRequests()
			gh.FailFamily(fakegithub.FamilyCheckRuns, tc.status)
			var prs []jobs.PR
			for i, p := range testPRs(t, 6) {
				prs = append(prs, s.openPR(int64(i%2+1), jobs.TierPaid, p))
			}
			s.waitDone(prs, 120*time.Second)
			s.waitFinalizesEnded(60 * time.Second)
			for _, pr := range prs {
				run, err := s.app.Store().GetRun(context.Background(), pr)
				if err != nil {
					t.Fatal(err)
				}
				st := gh.Stats(pr.Owner, pr.Repo, pr.Number)
				if n := s.summaryComments(pr); n != 1 {
					t.Errorf("%s: %d summary comments, want exactly 1", pr, n)
				}
				if st.Reviews != 1 || run.ReviewTotal == 0 {
					t.Errorf("%s: %d reviews (%d review jobs), want exactly 1", pr, st.Reviews, run.ReviewTotal)
				}
				if st.CommentsEdited != 0 || st.Duplicates != 0 || st.Rejected != 0 {
					t.Errorf("%s: %+v: want no summary edit, no duplicate, nothing refused", pr, st)
				}
				checks := gh.CheckRuns(pr.Owner, pr.Repo, run.Head)
				switch {
				case tc.status == 0 && len(checks) != 1:
					t.Errorf("%s: %d check runs with check runs working, want 1", pr, len(checks))
				case tc.status == 0:
					checkLifecycle(t, pr, checks[0], s.checkEvery)
				case len(checks) != 0:
					t.Errorf("%s: %d check runs, want none (every request was refused)", pr, len(checks))
				}
				checkResultsFirst(t, gh.Requests(), pr)
			}
			if n := s.metric("prq_jobs_gave_up_total", nil); n != 0 {
				t.Errorf("prq_jobs_gave_up_total = %v, want 0", n)
			}
			errs := s.metric("prq_github_decoration_errors_total", nil)
			hits := gh.FamilyRequests(fakegithub.FamilyCheckRuns)
			t.Logf("check runs answering %d: %d check-run requests for %d pull requests, prq_github_decoration_errors_total %v", tc.status, hits, len(prs), errs)
			if tc.status == 0 {
				if errs != 0 {
					t.Errorf("prq_github_decoration_errors_total = %v with check runs working, want 0", errs)
				}
				return
			}
			if got := s.metric("prq_github_decoration_errors_total", map[string]string{"status": strconv.Itoa(tc.status)}); got == 0 {
				t.Errorf("no decoration error counted with status %d", tc.status)
			}
			// a refusal turns check runs off for the installation (403) or
			// the repository (404) for a while, or for the head (422): each
			// head tries creating once and completing at most once (none
			// once the refusal is known), the head refused with 422 not
			// even that; a failure (500) is given up after 3 tries of the
			// completion. Progress updates only a run that exists: none.
			n := len(prs)
			bound := map[int]int{403: 2 * n, 404: 2 * n, 422: n, 500: (1 + 3) * n}[tc.status]
			if hits > bound {
				t.Errorf("%d check-run requests for %d pull requests answering %d, want at most %d", hits, len(prs), tc.status, bound)
			}
		})
	}
}

// waitFinalizesEnded waits until no finalize task is pending, active,
// scheduled or waiting to retry, then checks none was archived.
func (s *stack) waitFinalizesEnded(timeout time.Duration) {
	s.t.Helper()
	insp := asynq.NewInspectorFromRedisClient(s.app.Redis())
	count := func(list func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error), q string) int {
		ts, err := list(q, asynq.PageSize(1000))
		if errors.Is(err, asynq.ErrQueueNotFound) {
			return 0 // nothing was ever enqueued there
		}
		if err != nil {
			s.t.Fatal(err)
		}
		n := 0
		for _, ti := range ts {
			if ti.Type == jobs.TypeFinalize {
				n++
			}
		}
		return n
	}
	s.waitFor("every finalize ended", timeout, func() bool {
		for _, q := range jobs.Queues {
			for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){insp.ListPendingTasks, insp.ListActiveTasks, insp.ListScheduledTasks, insp.ListRetryTasks} {
				if count(list, q) != 0 {
					return false
				}
			}
		}
		return true
	})
	for _, q := range jobs.Queues {
		ts, err := insp.ListArchivedTasks(q, asynq.PageSize(1000))
		if errors.Is(err, asynq.ErrQueueNotFound) {
			continue
		}
		if err != nil {
			s.t.Fatal(err)
		}
		for _, ti := range ts {
			s.t.Errorf("archived %s task %s: %s", ti.Type, ti.ID, ti.LastErr)
		}
	}
}

// checkResultsFirst checks, in the order the fake received them, that
// the pull request's summary and review were posted before any request
// to complete its check run: a decoration never holds a result back.
func checkResultsFirst(t *testing.T, reqs []fakegithub.Request, pr jobs.PR) {
	t.Helper()
	repo := fmt.Sprintf("/repos/%s/%s/", pr.Owner, pr.Repo)
	summary, review, completion := -1, -1, -1
	for i, r := range reqs {
		p := r.APIPath()
		switch {
		case summary < 0 && r.Method == "POST" && p == fmt.Sprintf("%sissues/%d/comments", repo, pr.Number):
			summary = i
		case review < 0 && r.Method == "POST" && p == fmt.Sprintf("%spulls/%d/reviews", repo, pr.Number):
			review = i
		case completion < 0 && r.Method != "GET" && strings.HasPrefix(p, repo+"check-runs"):
			var in struct{ Status, Conclusion string }
			if json.Unmarshal(r.Body, &in) == nil && (in.Status == "completed" || in.Conclusion != "") && strings.Contains(string(r.Body), "#issuecomment-") && strings.Contains(string(r.Body), fmt.Sprintf("/pull/%d#", pr.Number)) {
				completion = i
			}
		}
	}
	if summary < 0 || review < 0 {
		t.Errorf("%s: summary posted at request %d, review at %d: want both", pr, summary, review)
		return
	}
	if completion >= 0 && (completion < summary || completion < review) {
		t.Errorf("%s: the check run's completion (request %d) was tried before the summary (%d) or the review (%d)", pr, completion, summary, review)
	}
}
