package admission

import (
	"cmp"
	"context"
	"embed"
	"fmt"
	"log/slog"
	"math/rand"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// The scripts as they were before they kept what one call reads in
// Lua memos (and wrote the virtual times, stats and admitted tickets'
// records once per call): a reference that reads Redis again for every
// value. TestMemoMatchesReference runs both on the same operations.
// When an operation's decisions change on purpose, change the copy too.
// Only the files the memos changed are copied, and start, sent and
// arrived as they were before they read reservations through
// reservation.lua's codec (TestMemoMatchesReference checks that move
// too), start and settle as they were before they kept the uncalled
// sums (start's call read every reservation instead: the test checks
// the sums against it, and against the reservations after each step); the others are read from lua/, as the scripts themselves read
// them. The copied order.lua is the old single file the prelude,
// reservation.lua, memo.lua and order.lua were split from.
//
//go:embed testdata/unmemoized/*.lua
var unmemoized embed.FS

func refScript(op string, files ...string) *redis.Script {
	read := func(name string) string {
		b, err := unmemoized.ReadFile("testdata/unmemoized/" + name)
		if err != nil {
			b, err = luaFiles.ReadFile("lua/" + name)
		}
		if err != nil {
			panic(err)
		}
		return string(b)
	}
	parts := []string{ratelimit.LuaLibrary, read("ticket.lua"), read("order.lua"), "local OP = '" + op + "'"}
	for _, f := range files {
		parts = append(parts, read(f))
	}
	return redis.NewScript(strings.Join(parts, "\n"))
}

// scriptSet is every operation's script, to swap the reference in.
type scriptSet struct {
	register, cancel, delay, started, calling, sent, settle, admit, position, stats *redis.Script
}

// refArrived is the reference's arrived: before settle took the call's
// way, a script of its own recorded it (" a<µs>") when the reply came.
var refArrived = refScript("arrived", "arrived.lua")

func currentScripts() scriptSet {
	return scriptSet{registerScript, cancelScript, delayScript, startedScript, callingScript, sentScript,
		settleScript, admitScript, positionScript, statsScript}
}

func (s scriptSet) use() {
	registerScript, cancelScript, delayScript, startedScript, callingScript, sentScript = s.register, s.cancel, s.delay, s.started, s.calling, s.sent
	settleScript, admitScript, positionScript, statsScript = s.settle, s.admit, s.position, s.stats
}

func referenceScripts() scriptSet {
	return scriptSet{
		register: refScript("register", "register.lua"), cancel: refScript("cancel", "cancel.lua"),
		delay: refScript("delay", "delay.lua"), started: refScript("started", "start.lua"),
		calling: refScript("calling", "start.lua"), sent: refScript("sent", "sent.lua"),
		settle:   refScript("settle", "settle.lua"),
		admit:    refScript("admit", "admit_pick.lua", "admit_backfill.lua", "admit.lua"),
		position: refScript("position", "position.lua"), stats: refScript("stats", "stats.lua"),
	}
}

// atPart is a reservation's charge time, " @<µs>".
var atPart = regexp.MustCompile(` @(\d+)`)

// dumpState is every key of a Redis, by name, in a form two Redis
// servers with the same logical state print alike (a hash's fields
// sorted: their order in Redis is not state; TTLs only as present). A
// reservation's charge time is printed as the reference keeps it, as
// its score in the resage zset.
func dumpState(t *testing.T, rdb *redis.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	ages := map[string][]redis.Z{} // resage key -> members from the reservations' " @"
	for _, k := range keys {
		if res, ok := strings.CutSuffix(k, ":adm:res"); ok {
			for id, r := range rdb.HGetAll(ctx, k).Val() {
				if m := atPart.FindStringSubmatch(r); m != nil {
					us, _ := strconv.ParseFloat(m[1], 64)
					ages[res+":adm:resage"] = append(ages[res+":adm:resage"], redis.Z{Score: us, Member: id})
				}
			}
		}
	}
	for k := range ages {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		typ := rdb.Type(ctx, k).Val()
		var v string
		switch typ {
		case "string":
			v = rdb.Get(ctx, k).Val()
		case "hash":
			m := rdb.HGetAll(ctx, k).Val()
			fs := make([]string, 0, len(m))
			for f, x := range m {
				if f == "uncalled" {
					continue // the reference keeps none (checkUncalled)
				}
				if strings.HasSuffix(k, ":adm:res") {
					x = atPart.ReplaceAllString(x, "")
				}
				fs = append(fs, f+"="+x)
			}
			slices.Sort(fs)
			v = strings.Join(fs, " ")
		case "zset", "none":
			zs := append(rdb.ZRangeWithScores(ctx, k, 0, -1).Val(), ages[k]...)
			slices.SortFunc(zs, func(a, b redis.Z) int {
				if c := cmp.Compare(a.Score, b.Score); c != 0 {
					return c
				}
				return strings.Compare(fmt.Sprint(a.Member), fmt.Sprint(b.Member))
			})
			typ = "zset"
			parts := make([]string, len(zs))
			for i, z := range zs {
				parts[i] = fmt.Sprintf("%v:%s", z.Member, strconv.FormatFloat(z.Score, 'g', -1, 64))
			}
			v = strings.Join(parts, " ")
		case "list":
			v = strings.Join(rdb.LRange(ctx, k, 0, -1).Val(), " ")
		case "set":
			m := rdb.SMembers(ctx, k).Val()
			slices.Sort(m)
			v = strings.Join(m, " ")
		}
		out[k] = typ + " ttl=" + strconv.FormatBool(rdb.PTTL(ctx, k).Val() > 0) + " " + v
	}
	return out
}

func diffState(want, got map[string]string) string {
	var b strings.Builder
	for k, w := range want {
		if g, ok := got[k]; !ok {
			fmt.Fprintf(&b, "%s: missing (want %q)\n", k, w)
		} else if g != w {
			fmt.Fprintf(&b, "%s:\n  want %q\n  got  %q\n", k, w, g)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			fmt.Fprintf(&b, "%s: extra %q\n", k, g)
		}
	}
	return b.String()
}

// checkUncalled says how the uncalled sums in s's Redis differ from the
// sums of its reservations not called yet, per key and dimension id
// ("": they match). tracked: the limiter keeps them (a window's none).
func checkUncalled(t *testing.T, rdb *redis.Client, s *Scheduler, tracked bool) string {
	t.Helper()
	keys, b, err := s.keys("m")
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	for _, r := range rdb.HVals(context.Background(), keys.Reservations).Val() {
		res := parseReservation(r, b.Keys())
		if res.Called || res.Key < 0 || res.Dims == nil || !tracked {
			continue
		}
		for i, id := range res.Dims {
			if i < len(res.Costs) {
				c, _ := strconv.ParseInt(res.Costs[i], 10, 64)
				sums[strconv.Itoa(res.Key)+":"+id] += c
			}
		}
	}
	var want []string
	for k, v := range sums {
		if v > 0 {
			want = append(want, k+":"+strconv.FormatInt(v, 10))
		}
	}
	slices.Sort(want)
	home := keys.State // one key: its state keeps them; several: vt
	if b.Keys() > 1 {
		home = keys.VirtualTimes
	}
	got := rdb.HGet(context.Background(), home, "uncalled").Val()
	if w := strings.Join(want, " "); got != w {
		return fmt.Sprintf("uncalled sums %q, the reservations add up to %q", got, w)
	}
	return ""
}

type memoClock struct{ t time.Time }

func (c *memoClock) now() time.Time { return c.t }

// TestMemoMatchesReference runs the same random operations (register,
// delay, admit, started, calling, sent at the call or taken along by
// the settle, settle with or without the call's way (the reference:
// sent, arrived, then settle), cancel) on two
// Redis servers, one with the reference scripts, and requires the same
// replies and, after every operation, the same state of every key: the
// memos change how many commands a call sends, never what it decides
// or stores.
func TestMemoMatchesReference(t *testing.T) {
	// the scripts are package state: this test is not parallel, so no
	// other test runs while it swaps them
	cur, ref := currentScripts(), referenceScripts()
	defer cur.use()
	bucket := ratelimit.Limits{RequestsPerPeriod: 40, TokensPerPeriod: 30000, Period: 10 * time.Second}
	window := bucket
	window.Limiter = ratelimit.LimiterWindow
	cases := []struct {
		name    string
		limits  ratelimit.Limits
		keys    int
		cfg     Config
		classes []string
	}{
		{"bucket", bucket, 1, Config{Aging: 4 * time.Second}, []string{"chat", "paid", "trial", "free"}},
		{"bucket, chat's reserve", bucket, 1, Config{ChatShare: 0.3, ChatCap: 0.4}, []string{"chat", "chat", "paid", "trial", "free"}},
		{"strict uncapped", bucket, 1, Config{Strict: true, ChatCap: 1, Aging: 3 * time.Second}, []string{"chat", "paid", "trial", "free"}},
		{"window, no chat", window, 1, Config{ChatShare: 0.05}, []string{"paid", "trial", "free"}},
		{"window, chat model", window, 1, Config{ChatModels: []string{"m"}, ChatCap: 0.3}, []string{"chat", "paid", "free"}},
		{"bucket, chat's reserve set, decaying", bucket, 1, Config{ChatShare: 0.02, ChatReserve: map[string]int64{"m": 9000}, ChatIdle: 300 * time.Millisecond}, []string{"chat", "paid", "trial", "free", "paid"}},
		{"window, chat model, reserve decaying", window, 1, Config{ChatModels: []string{"m"}, ChatReserve: map[string]int64{"m": 6000}, ChatIdle: 500 * time.Millisecond}, []string{"chat", "paid", "free", "paid"}},
		{"three keys", bucket, 3, Config{Aging: 5 * time.Second}, []string{"chat", "paid", "trial", "free"}},
		{"three keys, window", window, 3, Config{}, []string{"paid", "trial"}},
	}
	for ci, c := range cases {
		for seed := int64(1); seed <= 2; seed++ {
			t.Run(fmt.Sprintf("%s, seed %d", c.name, seed), func(t *testing.T) {
				clk := &memoClock{t: time.Unix(1_900_000_000, 0)}
				newSched := func() (*Scheduler, *redis.Client) {
					rdb := redistest.New(t).Client(t)
					keys := make([]string, c.keys)
					for i := range keys {
						keys[i] = "sk-" + strconv.Itoa(i)
					}
					b, err := ratelimit.NewKeyedBucket(rdb, "m", keys, c.limits)
					if err != nil {
						t.Fatal(err)
					}
					b.NowFunc = clk.now
					cfg := c.cfg
					cfg.NowFunc = clk.now
					cfg.SendLag = 50 * time.Millisecond
					s, err := New(rdb, map[string]*ratelimit.Bucket{"m": b}, nil, nil, cfg, slog.New(slog.DiscardHandler))
					if err != nil {
						t.Fatal(err)
					}
					return s, rdb
				}
				sRef, rRef := newSched()
				sNew, rNew := newSched()
				ctx := context.Background()
				rng := rand.New(rand.NewSource(int64(ci)*10 + seed))
				var waiting, admitted, started, called []string
				held := map[string]bool{} // called, the write not recorded: the settle takes it
				pick := func(l *[]string) (string, bool) {
					if len(*l) == 0 {
						return "", false
					}
					i := rng.Intn(len(*l))
					id := (*l)[i]
					*l = append((*l)[:i], (*l)[i+1:]...)
					return id, true
				}
				// both runs one operation; the reference first
				both := func(op string, f func(s *Scheduler) string) {
					ref.use()
					want := f(sRef)
					cur.use()
					got := f(sNew)
					if want != got {
						t.Fatalf("%s: reply differs\nwant %s\ngot  %s", op, want, got)
					}
					// the reference keeps no uncalled sums: the new state's
					// must be what its reservations add up to
					if d := checkUncalled(t, rNew, sNew, !c.limits.Windowed()); d != "" {
						t.Fatalf("%s: %s", op, d)
					}
					if d := diffState(dumpState(t, rRef), dumpState(t, rNew)); d != "" {
						t.Fatalf("%s: state differs:\n%s", op, d)
					}
				}
				nid := 0
				for step := 0; step < 400; step++ {
					clk.t = clk.t.Add(time.Duration(rng.Intn(400)) * time.Millisecond)
					switch r := rng.Intn(100); {
					case r >= 28 && r < 35:
						// a plan's tickets (or a few of anything) at once,
						// against the reference's one call each
						tks := registerBatchOf(rng, &nid, c.classes, clk.t, waiting, admitted)
						for _, tk := range tks {
							if !slices.Contains(waiting, tk.ID) {
								waiting = append(waiting, tk.ID)
							}
						}
						both(fmt.Sprintf("register %d at once", len(tks)), func(s *Scheduler) string {
							if s == sRef {
								// one call each, a µs apart: the batch
								// stamps its tickets so
								var oks []bool
								t0 := clk.t
								defer func() { clk.t = t0 }()
								for i, tk := range tks {
									clk.t = t0.Add(time.Duration(i) * time.Microsecond)
									ok, err := s.Register(ctx, tk)
									if err != nil {
										return err.Error()
									}
									oks = append(oks, ok)
								}
								return fmt.Sprint(oks)
							}
							oks, err := s.RegisterMany(ctx, tks)
							if err != nil {
								return err.Error()
							}
							return fmt.Sprint(oks)
						})
					case r < 40:
						tk := randomTicket(rng, &nid, c.classes, clk.t)
						waiting = append(waiting, tk.ID)
						if r >= 35 {
							at := clk.t.Add(time.Duration(rng.Intn(3000)) * time.Millisecond)
							both("delay "+tk.ID, func(s *Scheduler) string { return fmt.Sprint(s.RegisterAt(ctx, tk, at)) })
						} else {
							both("register "+tk.ID, func(s *Scheduler) string {
								ok, err := s.Register(ctx, tk)
								return fmt.Sprint(ok, err)
							})
						}
					case r < 65:
						budget := 1 + rng.Intn(6)
						batch := budget
						if rng.Intn(3) == 0 {
							batch = rng.Intn(budget + 1)
						}
						var adm []Admitted
						both(fmt.Sprintf("admit %d:%d", budget, batch), func(s *Scheduler) string {
							a, w, err := s.admit(ctx, "m", budget, batch)
							adm = a
							return fmt.Sprintf("%+v %v %v", a, w, err)
						})
						for _, a := range adm {
							waiting = slices.DeleteFunc(waiting, func(id string) bool { return id == a.ID })
							if a.Via != "reject" {
								admitted = append(admitted, a.ID)
							}
						}
					case r < 75:
						if id, ok := pick(&admitted); ok {
							both("started "+id, func(s *Scheduler) string { return fmt.Sprint(s.Started(ctx, "m", id)) })
							started = append(started, id)
						}
					case r < 82:
						if id, ok := pick(&started); ok {
							both("calling "+id, func(s *Scheduler) string {
								w, err := s.TryCalling(ctx, "m", id)
								return fmt.Sprint(w, err)
							})
							// the write recorded at once (a held Sent that
							// went), or taken along by the settle
							if rng.Intn(2) == 0 {
								both("sent "+id, func(s *Scheduler) string { return fmt.Sprint(s.Sent(ctx, "m", id, 20*time.Millisecond)) })
							} else {
								held[id] = true
							}
							called = append(called, id)
						}
					case r < 94:
						l := &called
						if rng.Intn(3) == 0 {
							l = &started
						}
						if id, ok := pick(l); ok {
							cost := ratelimit.Cost{Requests: 1, Tokens: int64(100 + rng.Intn(3000))}
							// the call's reply came (its way), or not; its
							// write, when no Sent recorded it
							way := NoWay
							if rng.Intn(4) > 0 {
								way.Arrival = 30 * time.Millisecond
							}
							if held[id] {
								way.Written = 20 * time.Millisecond
								delete(held, id)
							}
							both("settle "+id, func(s *Scheduler) string {
								if s == sRef && way.Written >= 0 {
									// the reference's sent, at the settle
									if err := s.Sent(ctx, "m", id, way.Written); err != nil {
										return err.Error()
									}
								}
								if s == sRef && way.Arrival >= 0 && c.limits.Windowed() {
									// the reference records the way first, as
									// arrived did when the reply came (nothing
									// reads it before settle)
									keys, _, _ := s.keys("m")
									if err := refArrived.Run(ctx, s.rdb, keys.list(), s.now(), id, (way.Arrival + ratelimit.MinWindowMargin).Microseconds()).Err(); err != nil {
										return err.Error()
									}
								}
								return fmt.Sprint(s.SettleCall(ctx, "m", id, cost, way))
							})
						}
					default:
						if id, ok := pick(&waiting); ok {
							both("cancel "+id, func(s *Scheduler) string {
								ok, err := s.Cancel(ctx, "m", id)
								return fmt.Sprint(ok, err)
							})
						}
					}
				}
			})
		}
	}
}

// TestAdmitCommandsPerTicket bounds the Redis commands admit's script
// runs per admitted ticket (a fixed workload on a fresh Redis and a
// fixed clock: the count is the same every run): the memos keep a
// saturated admit from reading the same heads, tickets and virtual
// times again for each ticket (39 commands per ticket before them), and
// from reading a zset's first member again after taking it, and it
// removes admitted tickets from the order in one command per zset (7.1
// before those two, now 3.3).
func TestAdmitCommandsPerTicket(t *testing.T) {
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	clk := &memoClock{t: time.Unix(1_900_000_000, 0)}
	b, err := ratelimit.NewBucket(rdb, "count", "sk", ratelimit.Limits{RequestsPerPeriod: 1 << 30, TokensPerPeriod: 1 << 34, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b.NowFunc = clk.now
	s, err := New(rdb, map[string]*ratelimit.Bucket{"count": b}, nil, nil, Config{NowFunc: clk.now}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	const n = 1200
	tiers := []string{"paid", "trial", "free"}
	for i := range n {
		tk := Ticket{ID: "t" + strconv.Itoa(i), Queue: tiers[i%3], Model: "count", Class: tiers[i%3],
			Tenant: strconv.Itoa(i % 50), PRSeq: int64(i / 4), Index: i % 4, Total: 4, Tokens: 1500}
		if _, err := s.Register(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	if err := admitScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	commands := func() int64 {
		info := rdb.Info(ctx, "stats").Val()
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "total_commands_processed:"); ok {
				c, _ := strconv.ParseInt(v, 10, 64)
				return c
			}
		}
		t.Fatal("no total_commands_processed in INFO")
		return 0
	}
	before := commands()
	admitted, calls := 0, 0
	for admitted < n {
		adm, _, err := s.Admit(ctx, "count", 64)
		if err != nil {
			t.Fatal(err)
		}
		if len(adm) == 0 {
			t.Fatalf("stalled at %d of %d", admitted, n)
		}
		admitted += len(adm)
		calls++
	}
	// less the EVALSHAs and the INFO that read before
	inside := float64(commands()-before-int64(calls)-1) / float64(n)
	t.Logf("%.2f commands inside admit per admitted ticket (%d calls)", inside, calls)
	if inside > 4 {
		t.Errorf("admit ran %.2f commands per admitted ticket inside its script, want at most 4", inside)
	}
}

// randomTicket is TestMemoMatchesReference's new ticket.
func randomTicket(rng *rand.Rand, nid *int, classes []string, now time.Time) Ticket {
	*nid++
	tk := Ticket{ID: "t" + strconv.Itoa(*nid), Queue: "q", Model: "m", Class: classes[rng.Intn(len(classes))],
		Tenant: strconv.Itoa(rng.Intn(5)), PRSeq: int64(1 + rng.Intn(6)), Index: rng.Intn(5), Total: 5,
		Tokens: int64(200 + rng.Intn(4000))}
	if rng.Intn(30) == 0 {
		tk.Tokens = 40000 // never fits: a reject
	}
	if rng.Intn(3) == 0 {
		tk.Output = tk.Tokens / 4
	}
	if rng.Intn(4) == 0 {
		tk.Enqueued = now.Add(-time.Duration(rng.Intn(5000)) * time.Millisecond)
	}
	return tk
}

// registerBatchOf is a batch for RegisterMany: mostly a plan's (one
// tenant and class, a new PR's files in order, a few in an order of
// their own), else random tickets; now and then with one registered
// already (waiting or admitted) or one twice.
func registerBatchOf(rng *rand.Rand, nid *int, classes []string, now time.Time, waiting, admitted []string) []Ticket {
	n := 1 + rng.Intn(6)
	var tks []Ticket
	if rng.Intn(3) > 0 {
		first := randomTicket(rng, nid, classes, now)
		first.PRSeq, first.Total = int64(7+rng.Intn(4)), n
		for i := range n {
			tk := first
			tk.ID, tk.Index = first.ID+"-"+strconv.Itoa(i), i
			if rng.Intn(5) == 0 {
				tk.Index = rng.Intn(n)
			}
			tk.Tokens = int64(200 + rng.Intn(4000))
			if tk.Output > 0 {
				tk.Output = tk.Tokens / 4
			}
			tks = append(tks, tk)
		}
	} else {
		for range n {
			tks = append(tks, randomTicket(rng, nid, classes, now))
		}
	}
	again := func(l []string) {
		if len(l) > 0 {
			tk := randomTicket(rng, nid, classes, now)
			tk.ID = l[rng.Intn(len(l))]
			tks = slices.Insert(tks, rng.Intn(len(tks)+1), tk)
		}
	}
	switch rng.Intn(6) {
	case 0:
		again(waiting)
	case 1:
		again(admitted)
	case 2:
		tks = slices.Insert(tks, rng.Intn(len(tks)+1), tks[rng.Intn(len(tks))])
	}
	return tks
}
