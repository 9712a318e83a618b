package bench

import (
	"bytes"
	"strings"
	"testing"

	"github.com/prq-dev/prq/fake/fakeopenai"
)

// TestReportShowsHold: against a window provider the table shows the
// margin each strategy held past the window (measured: the mean at the
// review model's calls), "—" for a token bucket.
func TestReportShowsHold(t *testing.T) {
	b := Flags{out: t.TempDir(), providerLimiter: fakeopenai.LimiterWindow, compress: 10, processes: 3, concurrency: 20}
	var out bytes.Buffer
	results := []benchResult{{Strategy: StrategyPrqWindow, HoldMS: 8.25}, {Strategy: StrategyPrq}}
	if err := writeBench(&out, b, results, nil); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "| prq's hold past the window") {
			if !strings.HasSuffix(line, "| 8.2 | — |") && !strings.HasSuffix(line, "| 8.3 | — |") {
				t.Fatalf("hold row %q, want 8.2 (or 8.3) ms for prq-window and — for the bucket", line)
			}
			return
		}
	}
	t.Fatalf("no hold row in the table:\n%s", out.String())
}
