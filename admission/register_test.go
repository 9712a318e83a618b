package admission

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// totalCommands is the server's count of commands processed.
func totalCommands(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	for l := range strings.SplitSeq(rdb.Info(context.Background(), "stats").Val(), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "total_commands_processed:"); ok {
			c, _ := strconv.ParseInt(v, 10, 64)
			return c
		}
	}
	t.Fatal("no total_commands_processed in INFO")
	return 0
}

// commandCalls is the server's count of calls of one command.
func commandCalls(t *testing.T, rdb *redis.Client, name string) int64 {
	t.Helper()
	for l := range strings.SplitSeq(rdb.Info(context.Background(), "commandstats").Val(), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "cmdstat_"+name+":calls="); ok {
			c, _ := strconv.ParseInt(strings.SplitN(v, ",", 2)[0], 10, 64)
			return c
		}
	}
	return 0
}

// TestRegisterCommandsPerTicket bounds the Redis commands register's
// script runs (a fixed workload on a fresh Redis and a fixed clock: the
// count is the same every run; a fixed clock: no TIME): a pull
// request's tickets of one model registered together pay the reads of
// the order's heads and virtual times, the write of each key and the
// wake once (3.5 commands a ticket here; 12.2 with one call each, as
// before RegisterMany), a chat alone its own (12; 13.7 before it read
// the virtual times in one command and wrote the stats in one).
func TestRegisterCommandsPerTicket(t *testing.T) {
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	clk := &memoClock{t: time.Unix(1_900_000_000, 0)}
	b, err := ratelimit.NewBucket(rdb, "count", "sk", ratelimit.Limits{RequestsPerPeriod: 1 << 30, TokensPerPeriod: 1 << 34, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(rdb, map[string]*ratelimit.Bucket{"count": b}, nil, nil, Config{NowFunc: clk.now}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := registerScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	tiers := []string{"paid", "trial", "free"}
	const prs, files = 60, 4
	before := totalCommands(t, rdb)
	for pr := range prs {
		var tks []Ticket
		for i := range files {
			tks = append(tks, Ticket{ID: "pr" + strconv.Itoa(pr) + "-" + strconv.Itoa(i), Queue: "q", Model: "count", Class: tiers[pr%3],
				Tenant: strconv.Itoa(pr % 20), PRSeq: int64(pr), Index: i, Total: files, Tokens: 1500})
		}
		reg, err := s.RegisterMany(ctx, tks)
		if err != nil || len(reg) != files || !reg[0] || !reg[files-1] {
			t.Fatalf("register: %v %v", reg, err)
		}
		clk.t = clk.t.Add(time.Millisecond)
	}
	// less the EVALSHAs and the INFO that read before
	batch := float64(totalCommands(t, rdb)-before-prs-1) / (prs * files)
	before = totalCommands(t, rdb)
	const chats = 60
	for i := range chats {
		tk := Ticket{ID: "chat" + strconv.Itoa(i), Queue: "chat", Model: "count", Class: "chat", Tenant: strconv.Itoa(i % 20), Tokens: 500}
		if ok, err := s.Register(ctx, tk); err != nil || !ok {
			t.Fatalf("register %s: %v %v", tk.ID, ok, err)
		}
		clk.t = clk.t.Add(time.Millisecond)
	}
	chat := float64(totalCommands(t, rdb)-before-chats-1) / chats
	t.Logf("inside register: %.2f commands per ticket of a %d-file pull request, %.2f per chat", batch, files, chat)
	if batch > 4.5 || chat > 14 {
		t.Errorf("register ran %.2f commands per ticket of a pull request and %.2f per chat, want at most 4.5 and 14", batch, chat)
	}
}

// failScripts fails every script call (the register after a crash).
type failScripts struct{}

func (failScripts) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (failScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			err := errors.New("down")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (failScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestSubmitManyHoldsFirst: SubmitMany holds every task, then registers
// the tickets; when the registration does not happen (a crash, Redis
// gone), the held tasks are left without tickets, and Reconcile adopts
// each. A task held already is reported false and its ticket not
// registered again.
func TestSubmitManyHoldsFirst(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	good, bad := srv.Client(t), srv.Client(t)
	bad.AddHook(failScripts{})
	ctx := context.Background()
	b, err := ratelimit.NewBucket(good, "m", "sk", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 100000, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	buckets := map[string]*ratelimit.Bucket{"m": b}
	client := asynq.NewClientFromRedisClient(good)
	crashing, err := New(bad, buckets, client, asynq.NewInspectorFromRedisClient(good), Config{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(good, buckets, client, asynq.NewInspectorFromRedisClient(good), Config{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ticket := func(id string, i int) Ticket {
		return Ticket{ID: id, Queue: "q", Model: "m", Class: "paid", Tenant: "1", PRSeq: 1, Index: i, Total: 3, Tokens: 10}
	}
	var subs []Submission
	for i, id := range []string{"a", "b", "c"} {
		subs = append(subs, Submission{Task: asynq.NewTask("t", nil), Ticket: ticket(id, i)})
	}
	if held, err := crashing.SubmitMany(ctx, subs); err == nil || len(held) != 3 || !held[0] || !held[2] {
		t.Fatalf("submit with registration failing: %v %v, want all held and an error", held, err)
	}
	backlog := func() int64 {
		st, _ := s.Stats(ctx, "m")
		return st.Backlog["paid"]
	}
	if n := backlog(); n != 0 {
		t.Fatalf("backlog %d before the reconciler", n)
	}
	rc := RunConfig{Queues: []string{"q"}, TicketOf: func(ti *asynq.TaskInfo) (Ticket, bool) {
		return ticket(ti.ID, int(ti.ID[0]-'a')), true
	}}
	if err := s.Reconcile(ctx, rc, true); err != nil {
		t.Fatal(err)
	}
	if n := backlog(); n != 3 {
		t.Fatalf("backlog %d after the reconciler, want the 3 held tasks adopted", n)
	}
	// submitted again, with a new one: only the new one is held and registered
	subs = append(subs, Submission{Task: asynq.NewTask("t", nil), Ticket: ticket("d", 3)})
	held, err := s.SubmitMany(ctx, subs)
	if err != nil || len(held) != 4 || held[0] || held[1] || held[2] || !held[3] {
		t.Fatalf("submitted again: %v %v, want only d held", held, err)
	}
	st, _ := s.Stats(ctx, "m")
	if st.Backlog["paid"] != 4 || st.InJobs["paid"] != 4 {
		t.Fatalf("after submitting again: backlog %d, in %d; want 4 and 4", st.Backlog["paid"], st.InJobs["paid"])
	}
}

// TestStartedOnABucketNeedsNoClock: a token bucket's start only takes
// the ticket out of the tickets and the released set (two commands, no
// script: no TIME, no bucket read), and the ticket is gone from both.
func TestStartedOnABucketNeedsNoClock(t *testing.T) {
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	b, err := ratelimit.NewBucket(rdb, "plain", "sk", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 1 << 20, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(rdb, map[string]*ratelimit.Bucket{"plain": b}, nil, nil, Config{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	tk := Ticket{ID: "job-1", Queue: "q", Model: "plain", Class: "paid", Tenant: "1", PRSeq: 1, Total: 1, Tokens: 100}
	if ok, err := s.Register(ctx, tk); err != nil || !ok {
		t.Fatalf("register: %v %v", ok, err)
	}
	adm, _, err := s.Admit(ctx, "plain", 1)
	if err != nil || len(adm) != 1 {
		t.Fatalf("admit: %v %v", adm, err)
	}
	keys, _, err := s.keys("plain")
	if err != nil {
		t.Fatal(err)
	}
	before, hellos := totalCommands(t, rdb), commandCalls(t, rdb, "hello")
	if err := s.Started(ctx, "plain", tk.ID); err != nil {
		t.Fatal(err)
	}
	// less the three INFOs between the two counts, and a new
	// connection's HELLO
	hellos = commandCalls(t, rdb, "hello") - hellos
	if n := totalCommands(t, rdb) - before - 3 - hellos; n != 2 {
		t.Errorf("Started ran %d commands, want 2 (HDEL, ZREM)", n)
	}
	if rdb.HExists(ctx, keys.Tickets, tk.ID).Val() || rdb.ZScore(ctx, keys.Released, tk.ID).Err() != redis.Nil {
		t.Error("the started ticket is still in the tickets or the released set")
	}
	if rdb.HExists(ctx, keys.Reservations, tk.ID).Val() == false {
		t.Error("the start dropped the reservation: the call and settle still need it")
	}
}

// TestCallingOnABucketKeepsItsSumsWithTheState: a token bucket's call
// reads the uncalled sums with the state (one HMGET of the state hash,
// which holds them) and writes them with its save: EVALSHA, TIME, the
// reservation's HGET, the state's HMGET and HSET and the reservation's
// mark; a settle after it writes no sums either, and ends the
// reservation with one HDEL.
func TestCallingOnABucketKeepsItsSumsWithTheState(t *testing.T) {
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	b, err := ratelimit.NewBucket(rdb, "plain", "sk", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 1 << 20, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(rdb, map[string]*ratelimit.Bucket{"plain": b}, nil, nil, Config{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	keys, _, err := s.keys("plain")
	if err != nil {
		t.Fatal(err)
	}
	tk := Ticket{ID: "job-1", Queue: "q", Model: "plain", Class: "paid", Tenant: "1", PRSeq: 1, Total: 1, Tokens: 100}
	if ok, err := s.Register(ctx, tk); err != nil || !ok {
		t.Fatalf("register: %v %v", ok, err)
	}
	if adm, _, err := s.Admit(ctx, "plain", 1); err != nil || len(adm) != 1 {
		t.Fatalf("admit: %v %v", adm, err)
	}
	if got := rdb.HGet(ctx, keys.State, "uncalled").Val(); !strings.HasPrefix(got, "0:") {
		t.Fatalf("after admission the state holds uncalled sums %q, want the ticket's", got)
	}
	if err := s.Started(ctx, "plain", tk.ID); err != nil {
		t.Fatal(err)
	}
	if err := callingScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	before := totalCommands(t, rdb)
	if err := s.Calling(ctx, "plain", tk.ID); err != nil {
		t.Fatal(err)
	}
	if n := totalCommands(t, rdb) - before - 1; n != 6 {
		t.Errorf("Calling ran %d commands, want 6 (EVALSHA, TIME, HGET, HMGET, HSET state, HSET reservation)", n)
	}
	if rdb.HGet(ctx, keys.State, "uncalled").Val() != "" || rdb.HExists(ctx, keys.VirtualTimes, "uncalled").Val() {
		t.Error("the call left uncalled sums behind")
	}
	if err := settleScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	before = totalCommands(t, rdb)
	if err := s.Settle(ctx, "plain", tk.ID, ratelimit.Cost{}); err != nil {
		t.Fatal(err)
	}
	// the reservation carries its charge's time: no zset to leave
	if n := totalCommands(t, rdb) - before - 1; n != 6 {
		t.Errorf("Settle ran %d commands, want 6 (EVALSHA, TIME, HGET, HMGET, HSET state, HDEL reservation)", n)
	}
	if rdb.HGet(ctx, keys.State, "uncalled").Val() != "" || rdb.HExists(ctx, keys.Reservations, tk.ID).Val() {
		t.Error("the settle left uncalled sums or the reservation behind")
	}
}

// TestStartLostHalfWay: a token bucket's start deletes the ticket, then
// the released entry; if only the first lands (a connection lost
// between), the reconciler drops the entry at its deadline, as it does
// every released entry without a ticket, and re-releases nothing.
func TestStartLostHalfWay(t *testing.T) {
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	clk := &memoClock{t: time.Unix(1_900_000_000, 0)}
	b, err := ratelimit.NewBucket(rdb, "plain", "sk", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 1 << 20, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b.NowFunc = clk.now
	s, err := New(rdb, map[string]*ratelimit.Bucket{"plain": b}, nil, nil, Config{NowFunc: clk.now}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	tk := Ticket{ID: "job-1", Queue: "q", Model: "plain", Class: "paid", Tenant: "1", PRSeq: 1, Total: 1, Tokens: 100}
	if ok, err := s.Register(ctx, tk); err != nil || !ok {
		t.Fatalf("register: %v %v", ok, err)
	}
	if adm, _, err := s.Admit(ctx, "plain", 1); err != nil || len(adm) != 1 {
		t.Fatalf("admit: %v %v", adm, err)
	}
	keys, _, _ := s.keys("plain")
	rdb.HDel(ctx, keys.Tickets, tk.ID) // the start's first command alone
	clk.t = clk.t.Add(s.cfg.ReleaseTimeout + time.Second)
	if err := s.Reconcile(ctx, RunConfig{}, false); err != nil {
		t.Fatal(err)
	}
	if n := rdb.ZCard(ctx, keys.Released).Val(); n != 0 {
		t.Fatalf("the released set holds %d entries after the deadline, want none", n)
	}
}
