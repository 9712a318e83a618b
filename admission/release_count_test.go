package admission

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// TestReleaseCommandsPerTask: a scheduled task is released with three
// commands (ZREM, LPUSH, HSET) inside its queue's one script call; a
// task waiting elsewhere (retry) reads its state first, and one that is
// pending already is left alone.
func TestReleaseCommandsPerTask(t *testing.T) {
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	b, err := ratelimit.NewBucket(rdb, "rel", "sk", ratelimit.Limits{RequestsPerPeriod: 1 << 20, TokensPerPeriod: 1 << 30, Period: 60e9})
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	s, err := New(rdb, map[string]*ratelimit.Bucket{"rel": b}, asynq.NewClientFromRedisClient(rdb), insp, Config{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		tk := Ticket{ID: "r" + strconv.Itoa(i), Queue: "q", Model: "rel", Class: "paid", Tenant: "1", Tokens: 10}
		if ok, err := s.Submit(ctx, asynq.NewTask("file:review", nil), tk); !ok || err != nil {
			t.Fatalf("submit: %v %v", ok, err)
		}
	}
	adm, _, err := s.Admit(ctx, "rel", n)
	if err != nil || len(adm) != n {
		t.Fatalf("admit: %d %v", len(adm), err)
	}
	if err := releaseScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	before := totalCommands(t, rdb)
	s.Release(ctx, adm)
	// the client's EVALSHA, then ZREM, HSET and LPUSH a task (and the
	// first INFO)
	if got, want := totalCommands(t, rdb)-before-1, int64(1+3*n); got != want {
		t.Errorf("releasing %d scheduled tasks took %d commands, want %d", n, got, want)
	}
	for _, a := range adm {
		if info, err := insp.GetTaskInfo("q", a.ID); err != nil || info.State != asynq.TaskStatePending {
			t.Fatalf("%s after release: %+v %v", a.ID, info, err)
		}
	}
	// a task in the retry set goes pending too (its state read first);
	// one pending already stays as it was
	if err := rdb.ZAdd(ctx, "asynq:{q}:retry", redis.Z{Score: 1, Member: "r0"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.LRem(ctx, "asynq:{q}:pending", 0, "r0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, "asynq:{q}:t:r0", "state", "retry").Err(); err != nil {
		t.Fatal(err)
	}
	codes, err := releaseScript.Run(ctx, rdb, []string{"asynq:{q}:pending", "asynq:{q}:scheduled", "asynq:{q}:retry",
		"asynq:{q}:archived", "asynq:{q}:completed", "asynq:{q}:t:r0", "asynq:{q}:t:r1"}, "r0", "r1").Int64Slice()
	if err != nil || len(codes) != 2 || codes[0] != 1 || codes[1] != -2 {
		t.Fatalf("release of a retrying and a pending task: %v %v, want [1 -2]", codes, err)
	}
	if info, err := insp.GetTaskInfo("q", "r0"); err != nil || info.State != asynq.TaskStatePending {
		t.Fatalf("the retrying task after release: %+v %v", info, err)
	}
	// a scheduled id whose task hash is gone is no task: not pushed, and
	// no hash is left behind
	if err := rdb.ZAdd(ctx, "asynq:{q}:scheduled", redis.Z{Score: 1, Member: "ghost"}).Err(); err != nil {
		t.Fatal(err)
	}
	codes, err = releaseScript.Run(ctx, rdb, []string{"asynq:{q}:pending", "asynq:{q}:scheduled", "asynq:{q}:retry",
		"asynq:{q}:archived", "asynq:{q}:completed", "asynq:{q}:t:ghost"}, "ghost").Int64Slice()
	if err != nil || len(codes) != 1 || codes[0] != 0 {
		t.Fatalf("release of a scheduled id with no task: %v %v, want [0]", codes, err)
	}
	if rdb.Exists(ctx, "asynq:{q}:t:ghost").Val() != 0 || slices.Contains(rdb.LRange(ctx, "asynq:{q}:pending", 0, -1).Val(), "ghost") {
		t.Fatal("the ghost was pushed or left a hash")
	}
}
