package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// before7 refuses SET with both NX and GET, as Redis before 7.0 does.
type before7 struct{ refused int }

func (h *before7) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *before7) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *before7) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := strings.ToLower(fmt.Sprint(cmd.Args()))
		if cmd.Name() == "set" && strings.Contains(args, " nx") && strings.Contains(args, " get") {
			h.refused++
			err := errors.New("ERR syntax error")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// TestClaimsAndLocksOnARedisBefore7: where SET NX GET is refused, a
// prompt's claim and a lock are taken as they are on Redis 7 (a SET NX,
// then a GET), and the refusal is met once.
func TestClaimsAndLocksOnARedisBefore7(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	hook := &before7{}
	rdb.AddHook(hook)
	st := store.New(rdb, jobs.TierFree)
	key := fmt.Sprintf("old:%d", time.Now().UnixNano())
	for _, tc := range []struct {
		id          string
		found, mine bool
	}{{"job-1", false, true}, {"job-2", false, false}, {"job-1", false, true}} {
		if _, found, mine, err := st.ReusableOrClaim(ctx, key, tc.id); err != nil || found != tc.found || mine != tc.mine {
			t.Fatalf("%s: found=%v mine=%v (%v), want found=%v mine=%v", tc.id, found, mine, err, tc.found, tc.mine)
		}
	}
	if err := st.SaveReusable(ctx, key, store.Result{Kind: jobs.KindSummary, Text: "Adds b."}); err != nil {
		t.Fatal(err)
	}
	if r, found, mine, err := st.ReusableOrClaim(ctx, key, "job-2"); err != nil || !found || mine || r.Text != "Adds b." {
		t.Fatalf("after the save: %+v found=%v mine=%v (%v), want the kept summary", r, found, mine, err)
	}
	pr := jobs.PR{Installation: 1, Owner: "o", Repo: "old-redis", Number: int(time.Now().UnixNano() % 1_000_000)}
	if _, ok, err := st.Lock(ctx, pr, "plan", "plan-1", time.Minute); err != nil || !ok {
		t.Fatalf("a free lock: ok=%v %v", ok, err)
	}
	if _, ok, err := st.Lock(ctx, pr, "plan", "plan-2", time.Minute); err != nil || ok {
		t.Fatalf("another owner took a held lock: ok=%v %v", ok, err)
	}
	if _, ok, err := st.Lock(ctx, pr, "plan", "plan-1", time.Minute); err != nil || !ok {
		t.Fatalf("the owner's next attempt: ok=%v %v, want the lock back", ok, err)
	}
	if hook.refused != 1 {
		t.Fatalf("SET NX GET sent %d times, want once (then not again)", hook.refused)
	}
}
