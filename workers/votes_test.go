package workers_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/internal/render"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// TestVotesReadInTurns: a finalize reads the reactions of at most
// MaxVoteReads of the pull request's tracked findings, the next going on
// where it stopped and round to the start; a comment read again counts
// nothing twice; a comment whose marker is not prq's for this pull
// request, or whose finding is not tracked, is not read.
func TestVotesReadInTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, gh := newStore(t), github()
	pr := testPR(t, 402)
	task := finishedRun(t, st, pr)
	const model, n = "votes-in-turns", workers.MaxVoteReads + 10
	tracked := map[string]store.TrackedFinding{}
	var own []ghapp.OwnReviewComment
	for i := range n {
		k := fmt.Sprintf("k%02d", i)
		tracked[k] = store.TrackedFinding{Model: model, Kind: store.FindingProse, Posted: 1_790_000_000}
		own = append(own, ghapp.OwnReviewComment{ID: int64(1000 + i), Body: "finding\n\n" + render.Markers{}.Finding(pr.Key(), k)})
	}
	own = append(own,
		ghapp.OwnReviewComment{ID: 5000, Body: "forged <!-- prq:finding key=k01 tag=0000 -->"},
		ghapp.OwnReviewComment{ID: 5001, Body: render.Markers{}.Finding(pr.Key(), "untracked")},
		ghapp.OwnReviewComment{ID: 5002, Body: "Addressed in `abc1234`."})
	if err := st.TrackFindings(ctx, pr, tracked); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	reads := map[int64]int{}
	gh.OwnCommentsFunc = func() ([]ghapp.OwnReviewComment, error) { return own, nil }
	gh.VotesFunc = func(id int64) (ghapp.Votes, error) {
		mu.Lock()
		defer mu.Unlock()
		reads[id]++
		return ghapp.Votes{Up: []string{"alice", "bob"}, Down: []string{"carol"}}, nil
	}
	f, err := workers.NewFinalizer(workers.FinalizerConfig{Attempts: newAttempts(t), Results: st, Publications: st, GitHub: gh, Turns: newPacer(t), Votes: st})
	if err != nil {
		t.Fatal(err)
	}
	totals := func() store.Acceptance {
		acc, err := store.ReadAcceptance(ctx, redistest.Shared(t).Client(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range acc {
			if a.Model == model {
				return a
			}
		}
		return store.Acceptance{}
	}
	if err := f.ProcessTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	if len(reads) != workers.MaxVoteReads || reads[1000] != 1 || reads[1000+n-1] != 0 {
		t.Fatalf("first pass read %d comments (%d of the first, %d of the last), want the first %d", len(reads), reads[1000], reads[1000+n-1], workers.MaxVoteReads)
	}
	if a := totals(); a.Up != 2*workers.MaxVoteReads || a.Down != workers.MaxVoteReads {
		t.Fatalf("after the first pass: %+v", a)
	}
	if err := f.ProcessTask(ctx, task); err != nil { // a retry, or the next head's finalize
		t.Fatal(err)
	}
	if reads[1000+n-1] != 1 || reads[1000] != 2 || reads[1000+workers.MaxVoteReads-1] != 1 || reads[5000]+reads[5001]+reads[5002] != 0 {
		t.Fatalf("second pass: reads %v, want the last %d then round to the start", reads, n-workers.MaxVoteReads)
	}
	if a := totals(); a.Up != 2*n || a.Down != n || a.Kind != store.FindingProse {
		t.Fatalf("after reading every comment, some twice: %+v, want %d up and %d down", a, 2*n, n)
	}
}

// TestVotesSweep: the periodic pass reads a pull request's reactions
// when they are due, each claimed once, and schedules the next read when
// its findings' age has doubled (at least VotesFirstRead later); a pull
// request without tracked findings (its data expired) is not read again.
func TestVotesSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, gh := newStore(t), github()
	pr, gone := testPR(t, 403), testPR(t, 404)
	gone.Number = 8
	// a clock long ago: other tests' pull requests are not due in it
	now := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	const model = "votes-sweep"
	k := "s1"
	if err := st.TrackFindings(ctx, pr, map[string]store.TrackedFinding{k: {Model: model, Kind: store.FindingSuggestion, Posted: now.Add(-4 * time.Hour).Unix(), What: "review:h1"}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []jobs.PR{pr, gone} {
		if err := st.ScheduleVotes(ctx, p, now); err != nil {
			t.Fatal(err)
		}
	}
	reads := 0
	gh.OwnCommentsFunc = func() ([]ghapp.OwnReviewComment, error) {
		return []ghapp.OwnReviewComment{{ID: 77, Body: render.Markers{}.Finding(pr.Key(), k)}}, nil
	}
	gh.VotesFunc = func(int64) (ghapp.Votes, error) { reads++; return ghapp.Votes{Up: []string{"alice"}}, nil }
	f, err := workers.NewFinalizer(workers.FinalizerConfig{Attempts: newAttempts(t), Results: st, Publications: st, GitHub: gh, Turns: newPacer(t), Votes: st,
		NowFunc: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.SweepVotesOnce(ctx); err != nil || n != 2 || reads != 1 {
		t.Fatalf("first pass: %d pull requests, %d reads, %v; want both claimed, the tracked one read", n, reads, err)
	}
	if n, err := f.SweepVotesOnce(ctx); err != nil || n != 0 {
		t.Fatalf("again at once: %d pull requests, %v; want none due", n, err)
	}
	now = now.Add(4*time.Hour - time.Second) // the findings' age (4 h), less a second
	if n, _ := f.SweepVotesOnce(ctx); n != 0 {
		t.Fatalf("before its time: %d pull requests read", n)
	}
	now = now.Add(time.Second)
	if n, err := f.SweepVotesOnce(ctx); err != nil || n != 1 || reads != 2 {
		t.Fatalf("at its time: %d pull requests, %d reads, %v; want the tracked one alone, read again", n, reads, err)
	}
	acc, err := store.ReadAcceptance(ctx, redistest.Shared(t).Client(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range acc {
		if a.Model == model && (a.Up != 1 || a.Down != 0) {
			t.Fatalf("read twice, counted %+v; want alice once", a)
		}
	}
}
