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
