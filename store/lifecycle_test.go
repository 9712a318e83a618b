package store_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// TestReopenedRunFinalizesAgain: closing a pull request and reopening it
// at the same head restarts its run; the restarted run's last file must
// trigger finalize again (it never did: the trigger stayed set).
func TestReopenedRunFinalizesAgain(t *testing.T) {
	ctx := context.Background()
	st := store.New(redistest.Shared(t).Client(t), jobs.TierFree)
	pr := jobs.PR{Installation: 1, Owner: "o", Repo: "reopen", Number: 1}
	run := store.Run{PR: pr, Head: "h1", Tier: jobs.TierPaid, SummaryTotal: 1}
	if _, started, err := st.StartRun(ctx, run, []store.FileData{{Path: "a.go", Index: 0}}); err != nil || !started {
		t.Fatal(started, err)
	}
	if last, err := st.CompleteFile(ctx, pr, "h1", store.Result{Kind: jobs.KindSummary, Index: 0, Path: "a.go"}); err != nil || !last {
		t.Fatalf("first run: last=%v %v", last, err)
	}
	if _, err := st.Cancel(ctx, pr); err != nil { // closed
		t.Fatal(err)
	}
	if _, started, err := st.StartRun(ctx, run, []store.FileData{{Path: "a.go", Index: 0}}); err != nil || !started {
		t.Fatalf("reopened: started=%v %v", started, err)
	}
	if last, err := st.CompleteFile(ctx, pr, "h1", store.Result{Kind: jobs.KindSummary, Index: 0, Path: "a.go"}); err != nil || !last {
		t.Fatalf("reopened run's last file: last=%v %v, want finalize triggered", last, err)
	}
}

// TestStartRunIsAtomic: concurrent plans of one head start it once.
func TestStartRunIsAtomic(t *testing.T) {
	ctx := context.Background()
	st := store.New(redistest.Shared(t).Client(t), jobs.TierFree)
	pr := jobs.PR{Installation: 1, Owner: "o", Repo: "race", Number: 1}
	var started atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, ok, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", SummaryTotal: 1}, []store.FileData{{Path: "a.go"}})
			if err != nil {
				t.Error(err)
			}
			if ok {
				started.Add(1)
			}
		}()
	}
	wg.Wait()
	if started.Load() != 1 {
		t.Fatalf("started %d times, want once", started.Load())
	}
	prev, ok, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h2", SummaryTotal: 1}, nil)
	if err != nil || !ok || prev != "h1" {
		t.Fatalf("a push: previous=%q started=%v %v", prev, ok, err)
	}
}

// TestEveryRunKeyHasATTL: per-PR and per-head keys get their TTL when
// they are created, whichever write creates them.
func TestEveryRunKeyHasATTL(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	st := store.New(rdb, jobs.TierFree)
	pr := jobs.PR{Installation: 1, Owner: "o", Repo: "ttl", Number: 1}
	if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", SummaryTotal: 2}, []store.FileData{{Path: "a.go"}, {Path: "b.go", Index: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CompleteFile(ctx, pr, "h1", store.Result{Kind: jobs.KindSummary, Index: 0, Path: "a.go"}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetDraft(ctx, pr, "chat:1", "hello"); err != nil {
		t.Fatal(err)
	}
	if err := st.SetPosted(ctx, pr, "summary", 5); err != nil {
		t.Fatal(err)
	}
	if err := st.SetTaskIDs(ctx, pr, "h1", []string{"x"}); err != nil {
		t.Fatal(err)
	}
	keys, err := rdb.Keys(ctx, "{prq:pr:"+pr.Key()+"}*").Result()
	if err != nil || len(keys) < 4 {
		t.Fatalf("keys %v %v", keys, err)
	}
	for _, k := range keys {
		if ttl, err := rdb.PTTL(ctx, k).Result(); err != nil || ttl <= 0 {
			t.Errorf("%s has no TTL (%v, %v)", k, ttl, err)
		}
	}
}

// TestResultsHashGetsItsTTLOnTheRunsFirstResult: the results hash gets
// its TTL from the run's first result, of either kind, in a first run
// and in a restarted one (StartRun deleted the hash); later results do
// not renew it.
func TestResultsHashGetsItsTTLOnTheRunsFirstResult(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	st := store.New(rdb, jobs.TierFree)
	for _, first := range []jobs.Kind{jobs.KindSummary, jobs.KindReview} {
		pr := jobs.PR{Installation: 1, Owner: "o", Repo: "results-ttl-" + string(first), Number: 1}
		key := "{prq:pr:" + pr.Key() + "}:results:h1"
		run := store.Run{PR: pr, Head: "h1", SummaryTotal: 2, ReviewTotal: 2}
		files := []store.FileData{{Path: "a.go"}, {Path: "b.go", Index: 1}}
		for round := range 2 { // the first run, then the run restarted (closed and reopened)
			if _, started, err := st.StartRun(ctx, run, files); err != nil || !started {
				t.Fatalf("%s round %d: started=%v %v", first, round, started, err)
			}
			if _, err := st.CompleteFile(ctx, pr, "h1", store.Result{Kind: first, Index: 0, Path: "a.go"}); err != nil {
				t.Fatal(err)
			}
			if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 {
				t.Fatalf("%s first, round %d: the results hash has no TTL (%v)", first, round, ttl)
			}
			rdb.PExpire(ctx, key, time.Hour)
			if _, err := st.CompleteFile(ctx, pr, "h1", store.Result{Kind: first, Index: 1, Path: "b.go"}); err != nil {
				t.Fatal(err)
			}
			if ttl := rdb.PTTL(ctx, key).Val(); ttl > time.Hour {
				t.Fatalf("%s first, round %d: a later result renewed the TTL (%v)", first, round, ttl)
			}
			if _, err := st.Cancel(ctx, pr); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestResultsOutliveAWaitingRun: a run that waits for its tenant's
// quota past the retention (SetWaiting before any result) gives its first
// result's hash the run's longer life, so the results never expire under
// the live run (and a later result never recreates them without a TTL).
func TestResultsOutliveAWaitingRun(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	st := store.New(rdb, jobs.TierFree)
	pr := jobs.PR{Installation: 1, Owner: "o", Repo: "results-wait", Number: 1}
	key := "{prq:pr:" + pr.Key() + "}:results:h1"
	if _, started, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", SummaryTotal: 2}, []store.FileData{{Path: "a.go"}, {Path: "b.go", Index: 1}}); err != nil || !started {
		t.Fatalf("started=%v %v", started, err)
	}
	// a month's quota: the run waits 40 days
	if err := st.SetWaiting(ctx, pr, "h1", time.Now().Add(40*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	runTTL := rdb.PTTL(ctx, "{prq:pr:"+pr.Key()+"}:run").Val()
	if runTTL < 40*24*time.Hour {
		t.Fatalf("the waiting run lives %v, want past its wait", runTTL)
	}
	if _, err := st.CompleteFile(ctx, pr, "h1", store.Result{Kind: jobs.KindSummary, Index: 0, Path: "a.go"}); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl < runTTL-time.Minute {
		t.Fatalf("the results hash lives %v, the run it belongs to %v", ttl, runTTL)
	}
}

// TestBaseChangeRestartsTheRun: the pull request's base edited (same
// head, another diff) plans the head again; the same head and base
// does not.
func TestBaseChangeRestartsTheRun(t *testing.T) {
	ctx := context.Background()
	st := store.New(redistest.Shared(t).Client(t), jobs.TierFree)
	pr := jobs.PR{Installation: 1, Owner: "o", Repo: "rebase", Number: 1}
	for i, tc := range []struct {
		base    string
		started bool
	}{{"b1", true}, {"b1", false}, {"b2", true}, {"", false}} {
		_, started, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", Base: tc.base, SummaryTotal: 1}, []store.FileData{{Path: "a.go"}})
		if err != nil || started != tc.started {
			t.Fatalf("plan %d at base %q: started=%v %v, want %v", i+1, tc.base, started, err, tc.started)
		}
	}
}

// TestQuotaSkipsAreCounted: a file refused by the tenant's quota counts
// in the run's SkippedQuota (it never did: the wrong prefix).
func TestQuotaSkipsAreCounted(t *testing.T) {
	ctx := context.Background()
	st := store.New(redistest.Shared(t).Client(t), jobs.TierFree)
	pr := jobs.PR{Installation: 1, Owner: "o", Repo: "quota", Number: 1}
	if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", SummaryTotal: 2}, []store.FileData{{Path: "a.go"}, {Path: "b.go", Index: 1}}); err != nil {
		t.Fatal(err)
	}
	for i, skipped := range []string{store.QuotaSkipPrefix + " reached, resets at 2026-01-01 00:00 UTC", "too large for gpt-4o"} {
		if _, err := st.CompleteFile(ctx, pr, "h1", store.Result{Kind: jobs.KindSummary, Index: i, Skipped: skipped}); err != nil {
			t.Fatal(err)
		}
	}
	if run, err := st.GetRun(ctx, pr); err != nil || run.SkippedQuota != 1 {
		t.Fatalf("SkippedQuota %d (%v), want 1", run.SkippedQuota, err)
	}
}

// TestResultOfAnEarlierRunIsNotCounted: a head planned again (its base
// edited) while a job of its earlier run is in flight: that job's result
// (of the old diff) is not counted; the new run's is (before: the old
// result counted, or, recorded just before the restart, was wiped while
// its task id kept the new run's job from being created: the run never
// finished; found by the lifecycle model, seed 138).
func TestResultOfAnEarlierRunIsNotCounted(t *testing.T) {
	ctx := context.Background()
	st := store.New(redistest.Shared(t).Client(t), jobs.TierFree)
	now := time.UnixMilli(1_700_000_000_000)
	st.NowFunc = func() time.Time { return now }
	pr := jobs.PR{Installation: 1, Owner: "o", Repo: "gen", Number: 1}
	files := []store.FileData{{Path: "a.go"}}
	if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", Base: "b1", SummaryTotal: 1}, files); err != nil {
		t.Fatal(err)
	}
	gen1 := now.UnixMilli()
	now = now.Add(time.Second)
	if _, started, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", Base: "b2", SummaryTotal: 1}, files); err != nil || !started {
		t.Fatalf("base edited: started=%v %v", started, err)
	}
	gen2 := now.UnixMilli()
	if last, err := st.CompleteFile(ctx, pr, "h1", store.Result{Kind: jobs.KindSummary, Path: "a.go", Text: "old diff", Run: gen1}); err != nil || last {
		t.Fatalf("the earlier run's result: last=%v %v, want not counted", last, err)
	}
	if last, err := st.CompleteFile(ctx, pr, "h1", store.Result{Kind: jobs.KindSummary, Path: "a.go", Text: "new diff", Run: gen2}); err != nil || !last {
		t.Fatalf("the run's own result: last=%v %v, want counted and last", last, err)
	}
	rs, err := st.Results(ctx, pr, "h1")
	if err != nil || len(rs) != 1 || rs[0].Text != "new diff" {
		t.Fatalf("results %+v %v, want the new diff's only", rs, err)
	}
}

// TestLockIsTakenBackByItsOwner: another owner waits for the holder; a new
// attempt of the holder's job (its process died) takes the lock back at
// once; the dead attempt's release does not free the new attempt's lock.
func TestLockIsTakenBackByItsOwner(t *testing.T) {
	ctx := context.Background()
	st := store.New(redistest.Shared(t).Client(t), jobs.TierFree)
	pr := jobs.PR{Installation: 1, Owner: "o", Repo: "lock", Number: 1}
	releaseDead, ok, err := st.Lock(ctx, pr, "publish", "final-h1", time.Minute)
	if err != nil || !ok {
		t.Fatalf("first attempt: ok=%v %v", ok, err)
	}
	if _, ok, err := st.Lock(ctx, pr, "publish", "final-h2", time.Minute); err != nil || ok {
		t.Fatalf("another owner took a held lock: ok=%v %v", ok, err)
	}
	if _, ok, err := st.Lock(ctx, pr, "publish", "final-h", time.Minute); err != nil || ok {
		t.Fatalf("an owner whose name prefixes the holder's took its lock: ok=%v %v", ok, err)
	}
	releaseNew, ok, err := st.Lock(ctx, pr, "publish", "final-h1", time.Minute)
	if err != nil || !ok {
		t.Fatalf("the owner's next attempt: ok=%v %v, want the lock back", ok, err)
	}
	releaseDead() // late, from the attempt that lost it
	if _, ok, _ := st.Lock(ctx, pr, "publish", "final-h2", time.Minute); ok {
		t.Fatal("the dead attempt's release freed the new attempt's lock")
	}
	releaseNew()
	if _, ok, err := st.Lock(ctx, pr, "publish", "final-h2", time.Minute); err != nil || !ok {
		t.Fatalf("after release: ok=%v %v, want the lock free", ok, err)
	}
}

// TestRunKeepsRepoConfig: the repository configuration's part of a run
// (instructions, language, the notice of a file that could not be used)
// reads back as written, and a later head without any clears it.
func TestRunKeepsRepoConfig(t *testing.T) {
	ctx := context.Background()
	st := store.New(redistest.Shared(t).Client(t), jobs.TierFree)
	pr := jobs.PR{Installation: 1, Owner: "o", Repo: "repoconfig", Number: 1}
	run := store.Run{PR: pr, Head: "h1", Tier: jobs.TierPaid, SummaryTotal: 1, Title: "t",
		Instructions: "Flag card numbers.", Language: "ja", ConfigNotice: "o/repoconfig:.prq.yaml at h1 line 2: chat: want true or false."}
	if _, _, err := st.StartRun(ctx, run, []store.FileData{{Path: "a.go", Index: 0, Instructions: "Check errors."}}); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetRun(ctx, pr)
	if err != nil {
		t.Fatal(err)
	}
	if got.Instructions != run.Instructions || got.Language != run.Language || got.ConfigNotice != run.ConfigNotice {
		t.Errorf("read back %q %q %q", got.Instructions, got.Language, got.ConfigNotice)
	}
	files, err := st.Files(ctx, pr, "h1")
	if err != nil || files[0].Instructions != "Check errors." {
		t.Errorf("file instructions %+v %v", files, err)
	}
	if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h2", Tier: jobs.TierPaid, SummaryTotal: 1}, []store.FileData{{Path: "a.go", Index: 0}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.GetRun(ctx, pr); got.Instructions != "" || got.Language != "" || got.ConfigNotice != "" {
		t.Errorf("the next head kept the last one's configuration: %q %q %q", got.Instructions, got.Language, got.ConfigNotice)
	}
}

// TestRepoSettingsRoundTrip: unknown until a plan records them, then
// read back as written, with a TTL, for that pull request alone.
func TestRepoSettingsRoundTrip(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	st := store.New(rdb, jobs.TierFree)
	pr := jobs.PR{Installation: 3, Owner: "o", Repo: "settings", Number: 9}
	if _, known, err := st.RepoSettings(ctx, pr); err != nil || known {
		t.Fatalf("before any plan: known %v %v", known, err)
	}
	want := jobs.RepoSettings{ChatOff: true, Drafts: true, Instructions: "Flag card numbers.", Language: "ja"}
	if err := st.SetRepoSettings(ctx, pr, want); err != nil {
		t.Fatal(err)
	}
	if got, known, err := st.RepoSettings(ctx, pr); err != nil || !known || got != want {
		t.Fatalf("got %+v known %v %v, want %+v", got, known, err, want)
	}
	other := pr
	other.Number = 10 // another pull request, perhaps on another base: its own
	if _, known, _ := st.RepoSettings(ctx, other); known {
		t.Errorf("another pull request sees this one's settings")
	}
	keys, _ := rdb.Keys(ctx, "*settings*").Result()
	for _, k := range keys {
		if ttl := rdb.TTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("%s has no TTL", k)
		}
	}
	if len(keys) != 1 {
		t.Errorf("keys %v, want one", keys)
	}
}

// TestWaitingKeepsTheRun: a head waiting for a quota's reset keeps its
// data until the reset and RunTTL beyond it, however long the wait; a
// superseded head's wait changes nothing.
func TestWaitingKeepsTheRun(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	st := store.New(rdb, jobs.TierFree)
	st.RunTTL = time.Hour
	pr := jobs.PR{Installation: 3, Owner: "o", Repo: "waiting", Number: 9}
	if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", Tier: jobs.TierPaid, SummaryTotal: 1}, []store.FileData{{Path: "a.go"}}); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(30 * 24 * time.Hour) // a month's quota
	if err := st.SetWaiting(ctx, pr, "h0", until); err != nil {
		t.Fatal(err)
	}
	if run, _ := st.GetRun(ctx, pr); !run.WaitingUntil.IsZero() {
		t.Fatalf("another head's wait was recorded: %v", run.WaitingUntil)
	}
	if err := st.SetWaiting(ctx, pr, "h1", until); err != nil {
		t.Fatal(err)
	}
	run, err := st.GetRun(ctx, pr)
	if err != nil || run.WaitingUntil.UnixMilli() != until.UnixMilli() {
		t.Fatalf("waiting until %v (%v), want %v", run.WaitingUntil, err, until)
	}
	keys, _ := rdb.Keys(ctx, "{prq:pr:"+pr.Key()+"}:*").Result()
	if len(keys) < 2 {
		t.Fatalf("keys %v, want the run's and its files'", keys)
	}
	for _, k := range keys {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl < 30*24*time.Hour {
			t.Errorf("%s lives %s, want past the reset and RunTTL", k, ttl)
		}
	}
}

// TestUnlockReleasesOnlyTheHoldersLock: Unlock deletes a lock that
// still holds the caller's value and leaves another holder's alone (the
// batch lane releases its model lock with it).
func TestUnlockReleasesOnlyTheHoldersLock(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	key := "{unlock-test}:lock"
	if err := rdb.Set(ctx, key, "owner-b", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if released, err := store.Unlock(ctx, rdb, key, "owner-a"); err != nil || released {
		t.Fatalf("another owner's unlock: released=%v %v", released, err)
	}
	if v, _ := rdb.Get(ctx, key).Result(); v != "owner-b" {
		t.Fatalf("the holder's lock is %q after another's unlock", v)
	}
	if released, err := store.Unlock(ctx, rdb, key, "owner-b"); err != nil || !released {
		t.Fatalf("the holder's unlock: released=%v %v", released, err)
	}
	if n, _ := rdb.Exists(ctx, key).Result(); n != 0 {
		t.Fatal("the lock is still there after its holder's unlock")
	}
	if released, err := store.Unlock(ctx, rdb, key, "owner-b"); err != nil || released {
		t.Fatalf("unlock of no lock: released=%v %v", released, err)
	}
}

// TestStartRunKeepsEveryFile: a head's files are written in chunks; every
// one of a large plan is kept, with its context, and every key created
// has its TTL.
func TestStartRunKeepsEveryFile(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	st := store.New(rdb, jobs.TierFree)
	pr := jobs.PR{Installation: 1, Owner: "o", Repo: "many-files", Number: 1}
	files := make([]store.FileData, 1203) // past two chunks' worth of fields
	for i := range files {
		files[i] = store.FileData{Path: fmt.Sprintf("f%d.go", i), Index: i}
	}
	if _, started, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", SummaryTotal: len(files), Context: "shared"}, files); err != nil || !started {
		t.Fatalf("started=%v %v", started, err)
	}
	got, err := st.Files(ctx, pr, "h1")
	if err != nil || len(got) != len(files) {
		t.Fatalf("%d files (%v), want %d", len(got), err, len(files))
	}
	for _, i := range []int{0, 499, 500, 1202} {
		f, shared, err := st.FileAndContext(ctx, pr, "h1", i)
		if err != nil || f.Path != files[i].Path || shared != "shared" {
			t.Fatalf("file %d: %+v %q %v", i, f, shared, err)
		}
	}
	keys, err := rdb.Keys(ctx, "{prq:pr:"+pr.Key()+"}*").Result()
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys %v %v, want the run and its files", keys, err)
	}
	for _, k := range keys {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("%s has no TTL (%v)", k, ttl)
		}
	}
}

// TestLockHoldsForItsTTL: a lock taken free, and one taken back by its
// owner's next attempt, each expire after the TTL asked for.
func TestLockHoldsForItsTTL(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	st := store.New(rdb, jobs.TierFree)
	pr := jobs.PR{Installation: 1, Owner: "o", Repo: "lock-ttl", Number: int(time.Now().UnixNano() % 1_000_000)}
	key := "{prq:pr:" + pr.Key() + "}:lock:plan"
	for i, ttl := range []time.Duration{time.Minute, 2 * time.Minute} { // free, then taken back
		if _, ok, err := st.Lock(ctx, pr, "plan", "plan-1", ttl); err != nil || !ok {
			t.Fatalf("attempt %d: ok=%v %v", i+1, ok, err)
		}
		if got := rdb.PTTL(ctx, key).Val(); got <= ttl-10*time.Second || got > ttl {
			t.Fatalf("attempt %d: the lock's TTL %v, want %v", i+1, got, ttl)
		}
	}
}
