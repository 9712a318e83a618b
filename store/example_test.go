package store_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// A planned head collects its per-file results; exactly one completion
// is the last, and a result delivered twice counts once.
func Example() {
	srv, err := redistest.Start()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := context.Background()

	st := store.New(rdb, jobs.TierFree)
	pr := jobs.PR{Installation: 42, Owner: "acme", Repo: "api", Number: 3}
	files := []store.FileData{{Path: "main.go", Index: 0}, {Path: "util.go", Index: 1}}
	_, started, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", Tier: jobs.TierPaid, SummaryTotal: 2}, files)
	fmt.Println("started:", started, err)

	for _, r := range []store.Result{
		{Kind: jobs.KindSummary, Index: 0, Path: "main.go", Text: "adds a flag"},
		{Kind: jobs.KindSummary, Index: 0, Path: "main.go", Text: "adds a flag"}, // redelivered
		{Kind: jobs.KindSummary, Index: 1, Path: "util.go", Text: "renames a helper"},
	} {
		last, err := st.CompleteFile(ctx, pr, "h1", r)
		fmt.Println("completed", r.Path, "last:", last, err)
	}
	run, _ := st.GetRun(ctx, pr)
	fmt.Printf("%s at %s: %s, %d of %d summaries\n", run.PR, run.Head, run.State, run.SummaryDone, run.SummaryTotal)

	// a push supersedes the head: its stale jobs see it is no longer current
	prev, _, _ := st.StartRun(ctx, store.Run{PR: pr, Head: "h2", Tier: jobs.TierPaid, SummaryTotal: 1}, files[:1])
	current, _ := st.Current(ctx, pr, "h1")
	fmt.Println("superseded:", prev, "still current:", current)
	// Output:
	// started: true <nil>
	// completed main.go last: false <nil>
	// completed main.go last: false <nil>
	// completed util.go last: true <nil>
	// acme/api#3 at h1: running, 2 of 2 summaries
	// superseded: h1 still current: false
}
