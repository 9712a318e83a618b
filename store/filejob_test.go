package store_test

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// roundTrips counts what a client sends: a command or a pipeline is one;
// a new connection's handshake (HELLO, CLIENT) is not counted.
type roundTrips struct{ n atomic.Int64 }

func handshake(cmd redis.Cmder) bool { return cmd.Name() == "hello" || cmd.Name() == "client" }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			r.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && !handshake(cmds[0]) {
			r.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// A file job's checks read in one round trip what each read alone
// returns: the installation's state, the run, whether the result is
// recorded, the file and the head's shared context; a part not there
// answers as its own read would.
func TestReadFileJobIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	rt := &roundTrips{}
	rdb.AddHook(rt)
	st := store.New(rdb, jobs.TierFree)
	pr := jobs.PR{Installation: 811, Owner: "o", Repo: "r", Number: 8}
	files := []store.FileData{{Path: "a.go", Index: 0, Patch: "@@ -1 +1 @@\n-a\n+b"}, {Path: "b.go", Index: 1, Patch: "@@ -1 +1 @@\n-c\n+d"}}
	if _, started, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h", SummaryTotal: 2, ReviewTotal: 2, Context: "shared words"}, files); err != nil || !started {
		t.Fatal(started, err)
	}
	if _, err := st.CompleteFile(ctx, pr, "h", store.Result{Kind: jobs.KindSummary, Index: 1, Path: "b.go"}); err != nil {
		t.Fatal(err)
	}
	st.SetInstallation(ctx, pr.Installation, "acme", 77, "suspend")

	read := store.FileJobRead{PR: pr, Head: "h", Kind: jobs.KindSummary, Index: 1, File: 1, Installation: pr.Installation, ReadInstallation: true}
	before := rt.n.Load()
	got := st.ReadFileJob(ctx, read)
	if n := rt.n.Load() - before; n != 1 {
		t.Fatalf("%d round trips, want 1", n)
	}
	run, err := st.GetRun(ctx, pr)
	fd, shared, ferr := st.FileAndContext(ctx, pr, "h", 1)
	why, derr := st.Disabled(ctx, pr.Installation)
	if err != nil || ferr != nil || derr != nil {
		t.Fatal(err, ferr, derr)
	}
	want := store.FileJobState{Disabled: why, Run: run, Done: true, File: fd, Shared: shared}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read %+v\nwant %+v", got, want)
	}
	if got.Disabled != store.DisabledSuspended || got.Shared != "shared words" || got.File.Path != "b.go" {
		t.Fatalf("read %+v: want the suspended installation, b.go and the shared context", got)
	}

	// nothing recorded for review 0; no installation asked; the file of a
	// head that has none, the run of a pull request that has none
	got = st.ReadFileJob(ctx, store.FileJobRead{PR: pr, Head: "h", Kind: jobs.KindReview, Index: 0, File: 0})
	if got.Done || got.DoneErr != nil || got.File.Path != "a.go" || got.Disabled != "" || got.DisabledErr != nil {
		t.Fatalf("read %+v: want a.go, no result, no installation read", got)
	}
	got = st.ReadFileJob(ctx, store.FileJobRead{PR: pr, Head: "other", Kind: jobs.KindReview, File: 0, NoFile: true})
	if got.FileErr != nil || got.File.Path != "" {
		t.Fatalf("read %+v: want no file read", got)
	}
	got = st.ReadFileJob(ctx, store.FileJobRead{PR: pr, Head: "other", File: 0})
	if !errors.Is(got.FileErr, store.ErrNotFound) {
		t.Fatalf("file of a head not stored: %v, want ErrNotFound", got.FileErr)
	}
	gone := jobs.PR{Installation: 812, Owner: "o", Repo: "r", Number: 9}
	got = st.ReadFileJob(ctx, store.FileJobRead{PR: gone, Head: "h", ReadInstallation: true, Installation: gone.Installation})
	if !errors.Is(got.RunErr, store.ErrNotFound) || got.Disabled != "" || got.DisabledErr != nil {
		t.Fatalf("read %+v: want the run not found and a plan-less installation enabled", got)
	}

	// a Redis that cannot answer: every part says so
	bad := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer bad.Close()
	got = store.New(bad, jobs.TierFree).ReadFileJob(ctx, read)
	if got.RunErr == nil || got.DoneErr == nil || got.FileErr == nil || got.DisabledErr == nil ||
		errors.Is(got.RunErr, store.ErrNotFound) || errors.Is(got.FileErr, store.ErrNotFound) {
		t.Fatalf("read from no Redis %+v: want each part's error", got)
	}
}
