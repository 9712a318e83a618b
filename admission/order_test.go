package admission_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelper())
	}
	code := m.Run()
	redistest.StopShared() // first: its output reader ends with the server
	if code == 0 {
		// the admission loop, its pub/sub reader and the reconciler must
		// all end with their context
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// newOrdered returns a scheduler on a fresh model with a fake clock:
// tokens per second = tps, requests unbounded in practice.
func newOrdered(t *testing.T, tps int64, cfg admission.Config) (*admission.Scheduler, *clock, string) {
	t.Helper()
	rdb := redistest.Shared(t).Client(t)
	model := fmt.Sprintf("m-%s-%d", t.Name(), time.Now().UnixNano())
	b, err := ratelimit.NewBucket(rdb, model, "sk", ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: tps, Period: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Unix(1_900_000_000, 0)}
	cfg.NowFunc = clk.now
	s, err := admission.New(redis.UniversalClient(rdb), map[string]*ratelimit.Bucket{model: b}, nil, nil, cfg, discard)
	if err != nil {
		t.Fatal(err)
	}
	return s, clk, model
}

func reg(t *testing.T, s *admission.Scheduler, tk admission.Ticket) {
	t.Helper()
	if tk.Queue == "" {
		tk.Queue = tk.Class
	}
	if ok, err := s.Register(context.Background(), tk); err != nil || !ok {
		t.Fatalf("register %s: %v %v", tk.ID, ok, err)
	}
}

// drain admits until n tickets are out, advancing the fake clock by the
// exact waits the scheduler reports.
func drain(t *testing.T, s *admission.Scheduler, clk *clock, model string, n int) []admission.Admitted {
	t.Helper()
	var out []admission.Admitted
	for guard := 0; len(out) < n && guard < 100000; guard++ {
		adm, wait, err := s.Admit(context.Background(), model, 1)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, adm...)
		if len(adm) == 0 {
			if wait == 0 {
				break
			}
			clk.advance(wait)
		}
	}
	return out
}

func TestChatBeatsEverything(t *testing.T) {
	t.Parallel()
	s, clk, model := newOrdered(t, 1000, admission.Config{ChatShare: 0.05})
	for i := 0; i < 20; i++ {
		reg(t, s, admission.Ticket{ID: fmt.Sprint("paid-", i), Model: model, Class: "paid", Tenant: "1", PRSeq: 1, Index: i, Total: 20, Tokens: 400})
	}
	got := drain(t, s, clk, model, 2) // the bucket (1000) fits two
	clk.advance(10 * time.Millisecond)
	reg(t, s, admission.Ticket{ID: "chat-1", Model: model, Class: "chat", Tenant: "9", Tokens: 100})
	got = append(got, drain(t, s, clk, model, 1)...)
	if got[2].ID != "chat-1" {
		t.Fatalf("third admission %s, want the chat that arrived behind 18 paid jobs", got[2].ID)
	}
}

func TestChatShareIsKeptFromBatch(t *testing.T) {
	t.Parallel()
	s, _, model := newOrdered(t, 1000, admission.Config{ChatShare: 0.1})
	reg(t, s, admission.Ticket{ID: "p1", Model: model, Class: "paid", Tenant: "1", Tokens: 850})
	reg(t, s, admission.Ticket{ID: "p2", Model: model, Class: "paid", Tenant: "1", Tokens: 60, Index: 1})
	adm, wait, _ := s.Admit(context.Background(), model, 10)
	if len(adm) != 1 || wait != 10*time.Millisecond {
		t.Fatalf("batch may leave no less than 100 tokens for chat: admitted %d, wait %s (want 1 and 10ms)", len(adm), wait)
	}
	reg(t, s, admission.Ticket{ID: "c1", Model: model, Class: "chat", Tenant: "2", Tokens: 150})
	if adm, _, _ := s.Admit(context.Background(), model, 10); len(adm) != 1 || adm[0].ID != "c1" {
		t.Fatalf("chat may use the reserve: %+v", adm)
	}
}

func TestWeightedShares(t *testing.T) {
	t.Parallel()
	s, clk, model := newOrdered(t, 10000, admission.Config{})
	for i := 0; i < 400; i++ {
		for _, tier := range []string{"paid", "trial", "free"} {
			reg(t, s, admission.Ticket{ID: fmt.Sprintf("%s-%d", tier, i), Model: model, Class: tier, Tenant: tier + "-t", PRSeq: int64(i), Tokens: 500})
		}
	}
	got := drain(t, s, clk, model, 20+440) // skip the first full bucket
	count := map[string]int{}
	for _, a := range got[20:] {
		count[a.Class]++
	}
	t.Logf("440 admissions under saturation: %v (weights 8:2:1 → 320:80:40)", count)
	for tier, want := range map[string]int{"paid": 320, "trial": 80, "free": 40} {
		if d := count[tier] - want; d < -4 || d > 4 {
			t.Errorf("%s admitted %d, want %d ± 4", tier, count[tier], want)
		}
	}
}

func TestStrictMode(t *testing.T) {
	t.Parallel()
	s, clk, model := newOrdered(t, 1000, admission.Config{Strict: true})
	reg(t, s, admission.Ticket{ID: "f", Model: model, Class: "free", Tenant: "1", Tokens: 100})
	reg(t, s, admission.Ticket{ID: "t", Model: model, Class: "trial", Tenant: "2", Tokens: 100})
	reg(t, s, admission.Ticket{ID: "p", Model: model, Class: "paid", Tenant: "3", Tokens: 100})
	got := drain(t, s, clk, model, 3)
	if got[0].ID != "p" || got[1].ID != "t" || got[2].ID != "f" {
		t.Fatalf("strict order: %s %s %s", got[0].ID, got[1].ID, got[2].ID)
	}
}

func TestTenantsAlternate(t *testing.T) {
	t.Parallel()
	s, clk, model := newOrdered(t, 1000, admission.Config{})
	for i := 0; i < 60; i++ {
		reg(t, s, admission.Ticket{ID: fmt.Sprint("big-", i), Model: model, Class: "paid", Tenant: "big", PRSeq: 1, Index: i, Total: 500, Tokens: 300})
	}
	for i := 0; i < 3; i++ {
		reg(t, s, admission.Ticket{ID: fmt.Sprint("small-", i), Model: model, Class: "paid", Tenant: "small", PRSeq: 2, Index: i, Total: 3, Tokens: 300})
	}
	got := drain(t, s, clk, model, 10)
	last := 0
	for i, a := range got {
		if a.Tenant == "small" {
			last = i
		}
	}
	var order []string
	for _, a := range got {
		order = append(order, a.ID)
	}
	if last > 7 {
		t.Fatalf("the 3-file PR waited behind the 500-file PR: %v", order)
	}
	t.Logf("order: %v", order)
}

func TestPRInProgressFinishesFirst(t *testing.T) {
	t.Parallel()
	s, clk, model := newOrdered(t, 1000, admission.Config{})
	for i := 0; i < 10; i++ {
		reg(t, s, admission.Ticket{ID: fmt.Sprint("pr1-", i), Model: model, Class: "trial", Tenant: "7", PRSeq: 1, Index: i, Total: 10, Tokens: 200})
	}
	got := drain(t, s, clk, model, 9) // PR 1 at 90%
	for i := 0; i < 5; i++ {
		reg(t, s, admission.Ticket{ID: fmt.Sprint("pr2-", i), Model: model, Class: "trial", Tenant: "7", PRSeq: 2, Index: i, Total: 5, Tokens: 200})
	}
	got = append(got, drain(t, s, clk, model, 1)...)
	if got[9].ID != "pr1-9" {
		t.Fatalf("after PR 1 reached 90%%, %s started before PR 1's last file", got[9].ID)
	}
}

func TestProgressBumpAcrossTenants(t *testing.T) {
	t.Parallel()
	s, clk, model := newOrdered(t, 100000, admission.Config{})
	// two tenants with equal service so far; one PR is nearly done
	reg(t, s, admission.Ticket{ID: "fresh", Model: model, Class: "paid", Tenant: "a", PRSeq: 1, Index: 0, Total: 10, Tokens: 900})
	reg(t, s, admission.Ticket{ID: "nearly", Model: model, Class: "paid", Tenant: "b", PRSeq: 2, Index: 9, Total: 10, Tokens: 900})
	got := drain(t, s, clk, model, 2)
	if got[0].ID != "nearly" {
		t.Fatalf("the PR at 90%% was not bumped ahead: %s first", got[0].ID)
	}
}

func TestAgingBound(t *testing.T) {
	t.Parallel()
	aging := 2 * time.Second
	s, clk, model := newOrdered(t, 1000, admission.Config{Aging: aging, Strict: true})
	reg(t, s, admission.Ticket{ID: "free-1", Model: model, Class: "free", Tenant: "f", Tokens: 500})
	var freeAt time.Time
	start := clk.now()
	for i := 0; i < 2000 && freeAt.IsZero(); i++ {
		reg(t, s, admission.Ticket{ID: fmt.Sprint("paid-", i), Model: model, Class: "paid", Tenant: "p", PRSeq: int64(i), Tokens: 500})
		for _, a := range drain(t, s, clk, model, 1) {
			if a.ID == "free-1" {
				freeAt = clk.now()
			}
		}
	}
	if freeAt.IsZero() {
		t.Fatal("the free job starved under constant paid load")
	}
	waited := freeAt.Sub(start)
	t.Logf("free job admitted after %s under strict paid load (aging bound %s)", waited, aging)
	if waited > aging+time.Second { // one job's refill (500 tokens at 1000/s) past the bound
		t.Fatalf("free job waited %s, past the aging bound %s plus one refill", waited, aging)
	}
}

func TestRejectNeverFits(t *testing.T) {
	t.Parallel()
	s, _, model := newOrdered(t, 1000, admission.Config{})
	reg(t, s, admission.Ticket{ID: "huge", Model: model, Class: "paid", Tenant: "1", Tokens: 5000})
	reg(t, s, admission.Ticket{ID: "ok", Model: model, Class: "paid", Tenant: "1", Tokens: 10, Index: 1})
	adm, _, err := s.Admit(context.Background(), model, 5)
	if err != nil || len(adm) != 2 || adm[0].Via != "reject" || adm[0].Dim != "2" || adm[1].ID != "ok" {
		t.Fatalf("want the huge job rejected and the next admitted: %+v %v", adm, err)
	}
}

func TestCancelAndDuplicates(t *testing.T) {
	t.Parallel()
	s, clk, model := newOrdered(t, 1000, admission.Config{})
	tk := admission.Ticket{ID: "a", Queue: "free", Model: model, Class: "free", Tenant: "1", Tokens: 10}
	reg(t, s, tk)
	if ok, err := s.Register(context.Background(), tk); ok || err != nil {
		t.Fatal("registered twice")
	}
	reg(t, s, admission.Ticket{ID: "b", Model: model, Class: "free", Tenant: "1", Tokens: 10, Index: 1})
	if ok, err := s.Cancel(context.Background(), model, "a"); !ok || err != nil {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	got := drain(t, s, clk, model, 2)
	if len(got) != 1 || got[0].ID != "b" {
		t.Fatalf("after cancel: %+v", got)
	}
	if ok, _ := s.Register(context.Background(), admission.Ticket{ID: "b", Queue: "free", Model: model, Class: "free", Tenant: "1", Tokens: 10}); ok {
		t.Fatal("a released ticket was registered again before it started")
	}
	st, _ := s.Stats(context.Background(), model)
	if st.Released != 1 || st.AdmJobs["free"] != 1 || st.InJobs["free"] != 2 {
		t.Fatalf("stats %+v", st)
	}
	s.Started(context.Background(), model, "b")
	if ok, _ := s.Register(context.Background(), admission.Ticket{ID: "b", Queue: "free", Model: model, Class: "free", Tenant: "1", Tokens: 10}); !ok {
		t.Fatal("a started ticket could not come back (a retry goes back through admission)")
	}
}

func TestSettleOnce(t *testing.T) {
	t.Parallel()
	s, _, model := newOrdered(t, 1000, admission.Config{})
	reg(t, s, admission.Ticket{ID: "a", Model: model, Class: "paid", Tenant: "1", Tokens: 300})
	s.Admit(context.Background(), model, 1)
	b, _ := s.Bucket(model)
	if err := s.Settle(context.Background(), model, "a", ratelimit.Cost{Requests: 1, Tokens: 400}); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(context.Background(), model, "a", ratelimit.Cost{Requests: 1, Tokens: 400}); err != ratelimit.ErrNotReserved {
		t.Fatalf("second settle: %v", err)
	}
	_ = b
	_ = jobs.TierPaid
}

// TestChatUsesTheReserveWhileBatchWaits: with chat capped, a batch ticket
// whose turn it is but which must leave the reserve does not hold back a
// chat that fits in the reserve; chat runs ahead of its share by at most
// the reserve, then waits its turn.
func TestChatUsesTheReserveWhileBatchWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk, model := newOrdered(t, 1000, admission.Config{ChatShare: 0.3}) // reserve 300 of 1000; cap 0.5
	for i := 0; i < 4; i++ {
		reg(t, s, admission.Ticket{ID: fmt.Sprint("c", i), Model: model, Class: "chat", Tenant: "2", Tokens: 100})
	}
	if adm, _, _ := s.Admit(ctx, model, 10); len(adm) != 4 {
		t.Fatalf("first chats: %+v", adm)
	}
	// level 600: the paid job (400) would leave 200 of the 300 reserve
	reg(t, s, admission.Ticket{ID: "p1", Model: model, Class: "paid", Tenant: "1", Tokens: 400})
	if adm, _, _ := s.Admit(ctx, model, 10); len(adm) != 0 {
		t.Fatalf("batch took the reserve: %+v", adm)
	}
	// chat has had more than its share: batch's turn, and batch waits for
	// the refill; the chats fit the reserve and go now
	for i := 4; i < 8; i++ {
		reg(t, s, admission.Ticket{ID: fmt.Sprint("c", i), Model: model, Class: "chat", Tenant: "2", Tokens: 100})
	}
	adm, _, err := s.Admit(ctx, model, 10)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range adm {
		ids = append(ids, a.ID+"/"+a.Via)
	}
	// the reserve is 300 tokens: three chats of 100 go ahead of batch;
	// the fourth still fits the bucket but would take more than the
	// reserve ahead of batch, and waits for it
	if len(adm) != 3 || adm[0].ID != "c4" || adm[2].ID != "c6" || adm[0].Via != "reserve" {
		t.Fatalf("admitted %v, want c4, c5, c6 through the reserve while p1 waits", ids)
	}
	t.Logf("batch waiting at the reserve: admitted %v", ids)
	// once the refill lets batch in, it goes first, then the last chat
	clk.advance(time.Second)
	adm, _, _ = s.Admit(ctx, model, 10)
	if len(adm) != 2 || adm[0].ID != "p1" || adm[1].ID != "c7" {
		t.Fatalf("after the refill: %+v, want p1 then c7", adm)
	}
}

// TestTakeOnlyWaiting: Take removes a waiting ticket (to register it
// under a fallback model) and leaves one admission released already;
// Waiting lists the waiting ones, oldest first, with their estimates.
func TestTakeOnlyWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk, model := newOrdered(t, 1000, admission.Config{})
	reg(t, s, admission.Ticket{ID: "first", Model: model, Class: "paid", Tenant: "1", Tokens: 10})
	clk.advance(time.Millisecond)
	reg(t, s, admission.Ticket{ID: "second", Model: model, Class: "free", Tenant: "2", Tokens: 40, Output: 30})
	clk.advance(time.Millisecond)
	reg(t, s, admission.Ticket{ID: "third", Model: model, Class: "chat", Tenant: "3", Tokens: 20, Index: 1})
	if got := drain(t, s, clk, model, 1); len(got) != 1 || got[0].ID != "third" {
		t.Fatalf("admitted %+v, want the chat first", got)
	}
	w, err := s.Waiting(ctx, model, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != 2 || w[0].ID != "first" || w[1].ID != "second" || w[1].Queue != "free" || w[1].Class != "free" || w[1].Tokens != 40 || w[1].Output != 30 || !w[0].Enqueued.Before(w[1].Enqueued) {
		t.Fatalf("waiting %+v, want first then second with their estimates", w)
	}
	if ok, err := s.Take(ctx, model, "third"); ok || err != nil {
		t.Fatalf("took a released ticket: %v %v", ok, err)
	}
	if ok, err := s.Take(ctx, model, "second"); !ok || err != nil {
		t.Fatalf("take a waiting ticket: %v %v", ok, err)
	}
	if ok, _ := s.Take(ctx, model, "second"); ok {
		t.Fatal("took a ticket twice")
	}
	if w, _ := s.Waiting(ctx, model, 1, 10); len(w) != 0 {
		t.Fatalf("waiting from the second: %+v, want none", w)
	}
	if w, _ := s.Waiting(ctx, model, 0, 10); len(w) != 1 || w[0].ID != "first" {
		t.Fatalf("waiting after take %+v, want only first", w)
	}
	if got := drain(t, s, clk, model, 2); len(got) != 1 || got[0].ID != "first" {
		t.Fatalf("admitted %+v after take, want only first", got)
	}
	st, _ := s.Stats(ctx, model)
	if st.Backlog["free"] != 0 || st.Released != 2 {
		t.Fatalf("stats after take %+v", st)
	}
}
