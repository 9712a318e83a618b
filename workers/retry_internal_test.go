package workers

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
)

// A job's first run is fresh (nothing of an earlier run to read: no
// reply to repair); a later run, a run after a wait for a twin, and a
// run after its budget was started again are not.
func TestFirstRunFresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := NewAttempts(redistest.Shared(t).Client(t))
	id := fmt.Sprintf("fresh-%d", time.Now().UnixNano())
	budget := RetryBudget{MaxAttempts: 10, MaxAge: time.Hour}
	now := time.UnixMilli(1_800_000_000_000)
	run := func() attempt {
		t.Helper()
		at, err := budgeted(ctx, a, id, 0, budget, now)
		if err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
		return at
	}
	if at := run(); !at.fresh || at.n != 1 {
		t.Fatalf("first run: fresh %v, n %d; want fresh, 1", at.fresh, at.n)
	}
	if at := run(); at.fresh {
		t.Fatal("second run: fresh")
	}
	if _, err := a.ReuseWait(ctx, id, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ReuseWait(ctx, id, time.Hour); err != nil {
		t.Fatal(err)
	}
	if at := run(); at.fresh || at.n != 1 {
		t.Fatalf("after two waits: fresh %v, n %d; want not fresh, 1", at.fresh, at.n)
	}
	if err := a.Rebase(ctx, id, now, time.Hour); err != nil {
		t.Fatal(err)
	}
	if at := run(); at.fresh {
		t.Fatal("after a rebase: fresh")
	}
}

// commandCalls reads INFO commandstats: the calls of each command Redis
// ran, those inside scripts included.
func commandCalls(t *testing.T, rdb *redis.Client) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int64{}
	for l := range strings.SplitSeq(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(l), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		v, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		calls[name], _ = strconv.ParseInt(v, 10, 64)
	}
	return calls
}

// commandsOf returns the commands Redis ran for do (less the INFO that
// read before it).
func commandsOf(t *testing.T, rdb *redis.Client, do func()) map[string]int64 {
	t.Helper()
	before := commandCalls(t, rdb)
	do()
	ran := map[string]int64{}
	for name, n := range commandCalls(t, rdb) {
		if d := n - before[name]; d > 0 && name != "info" {
			ran[name] = d
		}
	}
	return ran
}

// A job's first run costs Redis one command (a SET NX of its count), a
// later run five (the SET NX that finds the count, and the script: GET,
// SET, and the renewal of the job's move), its end one DEL.
func TestAttemptsCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.New(t).Client(t)
	a := NewAttempts(rdb)
	for _, s := range []*redis.Script{attemptsAdd, attemptsWait} {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	now := time.UnixMilli(1_800_000_000_000)
	cases := []struct {
		name string
		do   func() error
		want map[string]int64
	}{
		{"a first run", func() error { _, err := a.Add(ctx, "job", now, time.Hour); return err }, map[string]int64{"set": 1}},
		{"a later run", func() error { _, err := a.Add(ctx, "job", now.Add(time.Second), time.Hour); return err },
			map[string]int64{"set": 2, "evalsha": 1, "get": 1, "pexpire": 1}},
		{"the end", func() error { return a.Forget(ctx, "job") }, map[string]int64{"del": 1}},
	}
	for _, c := range cases {
		var err error
		got := commandsOf(t, rdb, func() { err = c.do() })
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !maps.Equal(got, c.want) {
			t.Errorf("%s ran %v, want %v", c.name, got, c.want)
		}
	}
}

// lastCount keeps the count its Attempts' Add returned last.
type lastCount struct {
	*Attempts
	last Count
}

func (l *lastCount) Add(ctx context.Context, id string, now time.Time, keep time.Duration) (Count, error) {
	c, err := l.Attempts.Add(ctx, id, now, keep)
	l.last = c
	return c, err
}

// A job's count across its runs, twin waits and rebases: the runs so
// far, the first run's time (or the rebase's), the rebase, and whether
// this run wrote the count (fresh), as the budget reads them.
func TestAttemptsSequence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := NewAttempts(redistest.Shared(t).Client(t))
	counted := &lastCount{Attempts: a}
	budget := RetryBudget{MaxAttempts: 10, MaxAge: time.Hour}
	id := fmt.Sprintf("sequence-%d", time.Now().UnixNano())
	t0 := time.UnixMilli(1_800_000_000_000)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	type step struct {
		name  string
		op    string // add, wait, rebase, forget
		at    time.Time
		want  Count // of an add
		waits int   // of a wait
	}
	steps := []step{
		{name: "a first run", op: "add", at: at(0), want: Count{N: 1, First: at(0), Fresh: true}},
		{name: "a second run", op: "add", at: at(10), want: Count{N: 2, First: at(0)}},
		{name: "a wait", op: "wait", waits: 1},
		{name: "a run after a wait", op: "add", at: at(20), want: Count{N: 2, First: at(0)}},
		{name: "a second wait", op: "wait", waits: 2},
		{name: "a third wait", op: "wait", waits: 3},
		// the same millisecond as the first: still not this run's count
		{name: "a run after waits that took off every run", op: "add", at: at(0), want: Count{N: 1, First: at(0)}},
		{name: "a rebase", op: "rebase", at: at(3600)},
		{name: "a run after a rebase", op: "add", at: at(3600), want: Count{N: 1, First: at(3600), Rebased: true}},
		{name: "a wait after a rebase", op: "wait", waits: 4},
		{name: "a run after a rebase and a wait", op: "add", at: at(3700), want: Count{N: 1, First: at(3600), Rebased: true}},
		{name: "another run after a rebase", op: "add", at: at(3800), want: Count{N: 2, First: at(3600), Rebased: true}},
		{name: "the end", op: "forget"},
		{name: "a run of a job under the same id", op: "add", at: at(7200), want: Count{N: 1, First: at(7200), Fresh: true}},
		{name: "its wait, counted afresh", op: "wait", waits: 1},
	}
	for _, s := range steps {
		switch s.op {
		case "add":
			run, err := budgeted(ctx, counted, id, 0, budget, s.at)
			if err != nil || counted.last != s.want {
				t.Fatalf("%s: %+v (%v), want %+v", s.name, counted.last, err, s.want)
			}
			if run.n != s.want.N || !run.since.Equal(s.want.First) || run.fresh != s.want.Fresh {
				t.Fatalf("%s: the budget reads %d runs since %v, fresh %v; want %+v", s.name, run.n, run.since, run.fresh, s.want)
			}
		case "wait":
			n, err := a.ReuseWait(ctx, id, time.Hour)
			if err != nil || n != s.waits {
				t.Fatalf("%s: %d waits (%v), want %d", s.name, n, err, s.waits)
			}
		case "rebase":
			if err := a.Rebase(ctx, id, s.at, time.Hour); err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
		case "forget":
			if err := a.Forget(ctx, id); err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
		}
	}
}

// Forget drops both of a job's keys: its count and its record (the move).
func TestForgetDropsCountAndRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	a := NewAttempts(rdb)
	id := fmt.Sprintf("forget-%d", time.Now().UnixNano())
	if _, err := a.Add(ctx, id, time.UnixMilli(1_800_000_000_000), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := a.SetMoved(ctx, id, Move{Model: "fallback"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	key, err := countKey(id)
	if err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, key, attemptsKey(id)).Val(); n != 2 {
		t.Fatalf("%d of the job's two keys before Forget", n)
	}
	if err := a.Forget(ctx, id); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, key, attemptsKey(id)).Val(); n != 0 {
		t.Errorf("%d of the job's two keys left after Forget", n)
	}
}

// crc16 is Redis Cluster's CRC16 (XMODEM).
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// keySlot is the cluster slot of key, as Redis Cluster's keyHashSlot
// finds it: the hash tag's ("{…}", the first '{' to the first '}' after
// it, not empty), else the whole key's.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key)) % 16384
}

// A job's count lies in its record's cluster slot, so Forget's DEL and
// the scripts touch one slot; an id that cannot have one is refused.
func TestCountKeySlot(t *testing.T) {
	t.Parallel()
	// the cluster spec's vectors
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16 = %#x, want 0x31c3", got)
	}
	if got := keySlot("foo"); got != 12182 {
		t.Fatalf("slot of foo = %d, want 12182", got)
	}
	if keySlot("{user1000}.following") != keySlot("{user1000}.followers") {
		t.Fatal("one tag, two slots")
	}
	// a job's id escapes the braces of what it is made of
	pr := jobs.PR{Installation: 1, Owner: "o{}", Repo: "r{x}", Number: 7}
	made := []string{
		jobs.FileTaskID(jobs.File{Kind: jobs.KindReview, PR: pr, HeadSHA: "ab{c}", Index: 2, PRSeq: 99}),
		jobs.ChatTaskID(jobs.Chat{PR: pr, CommentID: 5}),
		jobs.PlanTaskID(jobs.Plan{PR: pr, Delivery: "d{1}"}),
		jobs.FinalizeTaskID(jobs.Finalize{PR: pr, HeadSHA: "ab{c}", Run: 3}),
	}
	for _, id := range made {
		if strings.ContainsAny(id, "{}") {
			t.Errorf("a job id with a brace: %s", id)
		}
	}
	for _, id := range append(made, "a{b}c", "{b}", "a{b", "a{{b}", "}{b}") {
		key, err := countKey(id)
		if err != nil {
			t.Errorf("id %q: %v", id, err)
			continue
		}
		if got, want := keySlot(key), keySlot(attemptsKey(id)); got != want {
			t.Errorf("id %q: the count %s is in slot %d, the record %s in %d", id, key, got, attemptsKey(id), want)
		}
	}
	for _, id := range []string{"a}b", "a{}b", "a{}b{c}"} {
		if key, err := countKey(id); err == nil {
			t.Errorf("id %q: count key %s, want an error (no key of the record's slot)", id, key)
		}
	}
}

// luaCount runs attempts_count.lua's codec on Redis: ARGV[1] a stored
// record; the reply is {n, first (empty for none), rebased, the record
// written again}.
var luaCount = redis.NewScript(attemptsCountLua + "\nlocal c = countdecode(ARGV[1])\n" +
	"return {c.n, c.first or '', c.rebased, countencode(c)}")

// TestCountGolden: Go's and Lua's codecs of the count record read every
// golden case of testdata/attempts_count.json as it says, and write it
// again alike.
func TestCountGolden(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/attempts_count.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name    string `json:"name"`
		Stored  string `json:"stored"`
		N       int    `json:"n"`
		First   int64  `json:"first"`
		Rebased bool   `json:"rebased"`
		Encoded string `json:"encoded"`
		Error   bool   `json:"error"`
	}
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 10 {
		t.Fatalf("%d golden cases", len(cases))
	}
	rdb := redistest.Shared(t).Client(t)
	for _, c := range cases {
		got, err := decodeCount(c.Stored)
		lua, lerr := luaCount.Run(context.Background(), rdb, []string{"{golden}"}, c.Stored).Slice()
		if c.Error {
			if err == nil || lerr == nil {
				t.Errorf("%s: %q read by Go as %+v (%v), by Lua as %v (%v); want an error of both", c.Name, c.Stored, got, err, lua, lerr)
			}
			continue
		}
		if want := (countRecord{n: c.N, first: c.First, rebased: c.Rebased}); err != nil || got != want {
			t.Errorf("%s: Go reads %q as %+v (%v), want %+v", c.Name, c.Stored, got, err, want)
		}
		if enc := got.encode(); enc != c.Encoded {
			t.Errorf("%s: Go writes %q, want %q", c.Name, enc, c.Encoded)
		}
		first := ""
		if c.First != 0 {
			first = strconv.FormatInt(c.First, 10)
		}
		want := []any{int64(c.N), first, int64(b2i(c.Rebased)), c.Encoded}
		if lerr != nil || !reflect.DeepEqual(lua, want) {
			t.Errorf("%s: Lua reads %q as %v (%v), want %v", c.Name, c.Stored, lua, lerr, want)
		}
	}
}
