package metrics

import (
	"context"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prq-dev/prq/internal/redistest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared()
	os.Exit(code)
}

// A job that spent its retry budget shows in prq_jobs_gave_up_total and,
// through Redis, in every process's counts (the dashboard's).
func TestCountGaveUp(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	m := New(nil, nil, rdb, Config{})
	m.CountGaveUp("summary", "account")
	m.CountGaveUp("summary", "account")
	m.CountGaveUp("finalize", "github_rate_limited")
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.gaveUp)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "prq_jobs_gave_up_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			key := ""
			for _, l := range s.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + " "
			}
			series[key] = s.GetCounter().GetValue()
		}
	}
	if got := series["kind=summary reason=account "]; got != 2 || len(series) != 2 {
		t.Errorf("prq_jobs_gave_up_total = %v, want kind=summary reason=account at 2 of 2 series", series)
	}
	// another process (the dashboard's) reads the shared counts
	got := GaveUpCounts(context.Background(), rdb)
	if got["summary|account"] != 2 || got["finalize|github_rate_limited"] != 1 || len(got) != 2 {
		t.Errorf("GaveUpCounts = %v, want summary|account 2, finalize|github_rate_limited 1", got)
	}
}
