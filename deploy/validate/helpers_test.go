package validate

import (
	"bufio"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

var promParser = parser.NewParser(parser.Options{})

// knownMetrics reads testdata/metrics.txt (serve's /metrics, recorded)
// and adds the series Prometheus itself makes (up) and, for histograms,
// their _bucket, _sum and _count series.
func knownMetrics(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open("testdata/metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	known := map[string]bool{"up": true}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, typ, _ := strings.Cut(line, " ")
		known[name] = true
		if typ == "histogram" || typ == "summary" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				known[name+s] = true
			}
		}
	}
	if len(known) < 10 {
		t.Fatalf("testdata/metrics.txt lists %d metrics", len(known))
	}
	return known
}

// metricNames returns the metric names an expression selects.
func metricNames(t *testing.T, expr string) []string {
	t.Helper()
	e, err := promParser.ParseExpr(expr)
	if err != nil {
		t.Errorf("%q does not parse: %v", expr, err)
		return nil
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			if vs.Name == "" {
				t.Errorf("%q selects series without a metric name", expr)
			}
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}

func splitLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
