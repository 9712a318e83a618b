package bench

import (
	"context"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/harness"
	"github.com/prq-dev/prq/internal/redisproc"
	"github.com/prq-dev/prq/jobs"
)

// smokeFlags is a short corpus run's flags: one worker process of
// concurrency 4 running bin, 60 simulated seconds compressed 10×, the
// corpus (generated pull requests where it is absent).
func smokeFlags(t *testing.T, bin string) Flags {
	return Flags{workload: WorkloadDefault, provider: ProviderOpenAI, providerLimiter: fakeopenai.LimiterBucket, sim: time.Minute, compress: 10, drain: 6,
		processes: 1, concurrency: 4, seed: 1, sendLag: -1, contextTokens: -1, out: t.TempDir(), exe: bin}
}

// smokeRun runs prq once on b's workload against a Redis of its own,
// and returns its result and what it printed.
func smokeRun(t *testing.T, b Flags) (benchResult, string, error) {
	t.Helper()
	srv, err := redisproc.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	prs, _, err := harness.LoadPRs(b.corpus, 200, b.seed)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	r, err := benchStrategy(context.Background(), &out, b, buildWorkload(prs, b), srv.URL(), StrategyPrq, 1)
	return r, out.String(), err
}

func buildPrq(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "prq")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/prq-dev/prq/cmd/prq").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestBenchAnthropicSmoke: --provider anthropic runs prq against the
// fake's Messages API with Claude models (their workers get the
// Anthropic provider's settings alone), publishes pull requests (the
// corpus's large ones take longer than this short run) without a 429,
// bills them in dollars as prq counts it, and measures the
// review model's input per minute against its input limit.
func TestBenchAnthropicSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis, the fakes and a worker process for ~30 s")
	}
	b := smokeFlags(t, buildPrq(t))
	b.provider = ProviderAnthropic
	r, out, err := smokeRun(t, b)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	t.Logf("%d/%d PRs, %d 429s, $%.4f (prq counted $%.4f), %.1f%% of input from the cache, input per minute %.2f× the limit",
		r.PRsDone, r.PRs, r.Provider429s, r.Bill.Dollars, r.Bill.Counted, 100*r.Bill.CachedShare, r.InputPerLimit)
	if r.PRsDone == 0 || r.Provider429s != 0 {
		t.Errorf("%d of %d PRs published, %d provider 429s; want some and none", r.PRsDone, r.PRs, r.Provider429s)
	}
	if r.Bill.Dollars <= 0 || math.Abs(r.Bill.Dollars-r.Bill.Counted) > 1e-6+r.Bill.Dollars*1e-6 {
		t.Errorf("billed $%v, prq counted $%v: want a bill and the same count", r.Bill.Dollars, r.Bill.Counted)
	}
	if r.InputPerLimit <= 0 || r.Bill.CachedShare <= 0 {
		t.Errorf("input per minute %v× the limit, %v served from the cache: want both measured", r.InputPerLimit, r.Bill.CachedShare)
	}
}

// TestBenchWorkerExit: a worker process that exits during the run ends
// it with an error naming the process and its log, at once, instead of
// waiting out the run.
func TestBenchWorkerExit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis and the fakes")
	}
	sh, err := exec.LookPath("false")
	if err != nil {
		t.Skip("no false(1) here")
	}
	_, _, err = smokeRun(t, smokeFlags(t, sh))
	if err == nil || !strings.Contains(err.Error(), "worker process 0 of prq exited") {
		t.Fatalf("err = %v, want the worker's exit", err)
	}
}

// TestBenchGitLabSmoke: --gitlab-tenants moves tenants to GitLab groups
// on a fake GitLab, their merge requests and chat through GitLab's
// webhooks, on the same worker process and limiter as the GitHub ones:
// merge requests of both forges are published, the provider never
// answers 429.
func TestBenchGitLabSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis, the fakes and a worker process for ~30 s")
	}
	b := smokeFlags(t, buildPrq(t))
	b.gitlabTenants = 3
	r, out, err := smokeRun(t, b)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	if r.GitLabPRs == 0 || r.GitLabDone == 0 || r.PRsDone == r.GitLabDone || r.Provider429s != 0 {
		t.Fatalf("%d/%d PRs published, %d/%d of them GitLab merge requests, %d provider 429s; want both forges' published and no 429\n%s",
			r.PRsDone, r.PRs, r.GitLabDone, r.GitLabPRs, r.Provider429s, out)
	}
	t.Logf("%d/%d published, GitLab %d/%d", r.PRsDone, r.PRs, r.GitLabDone, r.GitLabPRs)
}

// TestGitLabWorkload: --gitlab-tenants N moves the first N tenants of
// gitlabOrder to GitLab (a paid, a trial and a free one first), keeping
// their tiers and the arrivals; tenant 1 (the large PRs) stays on GitHub.
func TestGitLabWorkload(t *testing.T) {
	prs, _, err := harness.LoadPRs("", 200, 1)
	if err != nil {
		t.Fatal(err)
	}
	b := Flags{sim: 10 * time.Minute, compress: 10, seed: 1}
	gh := buildWorkload(prs, b)
	b.gitlabTenants = 3
	mixed := buildWorkload(prs, b)
	if len(mixed.events) != len(gh.events) || len(mixed.prs) != len(gh.prs) {
		t.Fatalf("%d events, %d PRs; GitHub alone %d, %d", len(mixed.events), len(mixed.prs), len(gh.events), len(gh.prs))
	}
	moved := map[int64]bool{}
	for i, e := range mixed.events {
		g := gh.events[i]
		if e.at != g.at || e.pr.Number != g.pr.Number || e.tier != g.tier {
			t.Fatalf("event %d changed: %+v, GitHub alone %+v", i, e, g)
		}
		gitlab := jobs.ForgeOf(e.pr.Installation) == jobs.ForgeGitLab
		if gitlab != (e.event == eventGitLabOpen || e.event == eventGitLabNote) {
			t.Fatalf("event %d: %s for tenant %d", i, e.event, e.pr.Installation)
		}
		if gitlab {
			moved[g.pr.Installation] = true
			if e.pr.Installation-jobs.GitLabTenantBase != g.pr.Installation || e.pr.Owner != glOwner(e.pr.Installation) {
				t.Fatalf("event %d: tenant %d (%s), was %d", i, e.pr.Installation, e.pr.Owner, g.pr.Installation)
			}
		}
	}
	if len(moved) != 3 || !moved[4] || !moved[8] || !moved[2] {
		t.Errorf("tenants moved to GitLab: %v, want 2, 4 and 8", moved)
	}
}
