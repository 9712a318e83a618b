package admission_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// newKeyed returns a scheduler on a fresh model served by n API keys,
// each with limits, on a fake clock.
func newKeyed(t *testing.T, n int, limits ratelimit.Limits) (*admission.Scheduler, *ratelimit.Bucket, *clock, string) {
	t.Helper()
	return newKeyedConfig(t, n, limits, admission.Config{SendLag: -1})
}

// newKeyedConfig is newKeyed with cfg (its NowFunc is the test's clock).
func newKeyedConfig(t *testing.T, n int, limits ratelimit.Limits, cfg admission.Config) (*admission.Scheduler, *ratelimit.Bucket, *clock, string) {
	t.Helper()
	rdb := redistest.Shared(t).Client(t)
	model := fmt.Sprintf("m-%s-%d", t.Name(), time.Now().UnixNano())
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("sk-%s-%d", t.Name(), i)
	}
	b, err := ratelimit.NewKeyedBucket(rdb, model, keys, limits)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Unix(1_900_000_000, 0)}
	b.NowFunc = clk.now
	cfg.NowFunc = clk.now
	s, err := admission.New(redis.UniversalClient(rdb), map[string]*ratelimit.Bucket{model: b}, nil, nil, cfg, discard)
	if err != nil {
		t.Fatal(err)
	}
	return s, b, clk, model
}

func registerN(t *testing.T, s *admission.Scheduler, model, prefix string, n int, tokens int64) {
	t.Helper()
	for i := range n {
		tk := admission.Ticket{ID: fmt.Sprintf("%s%d", prefix, i), Queue: "q", Model: model, Class: "paid", Tenant: "t", PRSeq: int64(i), Tokens: tokens}
		if _, err := s.Register(context.Background(), tk); err != nil {
			t.Fatal(err)
		}
	}
}

// tokensLeft is what each key's bucket holds now.
func tokensLeft(t *testing.T, b *ratelimit.Bucket) []int64 {
	t.Helper()
	out := make([]int64, b.Keys())
	for i := range out {
		c, _, err := b.ForKey(i).Available(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out[i] = c.Tokens
	}
	return out
}

// Each job is charged to one key, the one with the most room, so the
// keys fill evenly to n times one key's limit; the reply and the
// reservation name the key, and a settle goes back to that key's bucket.
func TestKeysSpreadAndSettle(t *testing.T) {
	for _, limiter := range []ratelimit.Limiter{ratelimit.LimiterBucket, ratelimit.LimiterWindow} {
		t.Run(string(limiter), func(t *testing.T) {
			ctx := context.Background()
			s, b, clk, model := newKeyed(t, 3, ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 1000, Period: time.Second, Limiter: limiter})
			registerN(t, s, model, "a", 7, 500)
			adm, wait, err := s.Admit(ctx, model, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(adm) != 6 || wait <= 0 {
				t.Fatalf("admitted %d (wait %s), want 6 of 500 tokens on three keys of 1000, then a wait", len(adm), wait)
			}
			per := map[int]int{}
			for _, a := range adm {
				per[a.Key]++
				k, err := s.KeyOf(ctx, model, a.ID)
				if err != nil || k != a.Key {
					t.Fatalf("%s: KeyOf %d (%v), admitted on key %d", a.ID, k, err, a.Key)
				}
			}
			if per[0] != 2 || per[1] != 2 || per[2] != 2 {
				t.Fatalf("admissions per key %v, want 2 each", per)
			}
			if left := tokensLeft(t, b); left[0] != 0 || left[1] != 0 || left[2] != 0 {
				t.Fatalf("tokens left per key %v, want all 0", left)
			}
			// a job that made no call gives its whole charge back, to its key
			var onKey1 admission.Admitted
			for _, a := range adm {
				if a.Key == 1 {
					onKey1 = a
				}
			}
			if err := s.Started(ctx, model, onKey1.ID); err != nil {
				t.Fatal(err)
			}
			if err := s.Settle(ctx, model, onKey1.ID, ratelimit.Cost{}); err != nil {
				t.Fatal(err)
			}
			if left := tokensLeft(t, b); left[0] != 0 || left[1] != 500 || left[2] != 0 {
				t.Fatalf("tokens left per key after refunding a key-1 job %v, want [0 500 0]", left)
			}
			if k, _ := s.KeyOf(ctx, model, onKey1.ID); k != 0 {
				t.Fatalf("a settled job still has key %d", k)
			}
			// the waiting ticket goes where the room is
			adm, _, err = s.Admit(ctx, model, 10)
			if err != nil || len(adm) != 1 || adm[0].Key != 1 {
				t.Fatalf("admitted %+v (%v), want a6 on key 1", adm, err)
			}
			clk.advance(3 * time.Second)
			// too large for any key: rejected, not waiting forever
			registerN(t, s, model, "big", 1, 1001)
			adm, _, err = s.Admit(ctx, model, 10)
			if err != nil || len(adm) != 1 || adm[0].Via != "reject" || adm[0].Dim == "" {
				t.Fatalf("a ticket over every key's burst: %+v (%v), want a reject", adm, err)
			}
		})
	}
}

// A paused key is skipped: its model keeps admitting on the others, up
// to their room; with every key paused the model admits nothing and
// shows as paused.
func TestPausedKeySkipped(t *testing.T) {
	ctx := context.Background()
	s, b, clk, model := newKeyed(t, 3, ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 1000, Period: time.Second})
	if err := s.PauseKey(ctx, model, 2, "401 invalid_api_key", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.PauseKey(ctx, model, 3, "x", time.Minute); err == nil {
		t.Fatal("pausing a key the model does not have: no error")
	}
	registerN(t, s, model, "p", 6, 500)
	adm, wait, err := s.Admit(ctx, model, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(adm) != 4 || wait <= 0 {
		t.Fatalf("admitted %d (wait %s), want 4 on the two live keys, then a wait", len(adm), wait)
	}
	for _, a := range adm {
		if a.Key == 2 {
			t.Fatalf("%s was charged to the paused key", a.ID)
		}
	}
	if left := tokensLeft(t, b); left[2] != 1000 {
		t.Fatalf("the paused key's bucket was charged: %v", left)
	}
	if p := s.Paused(ctx); len(p) != 0 {
		t.Fatalf("model paused %v: its other keys serve", p)
	}
	if pk := s.PausedKeys(ctx, model); len(pk) != 1 || pk[2] != "401 invalid_api_key" {
		t.Fatalf("paused keys %v", pk)
	}
	for _, k := range []int{0, 1} {
		if err := s.PauseKey(ctx, model, k, "401 invalid_api_key", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	clk.advance(2 * time.Second)
	if adm, _, err := s.Admit(ctx, model, 10); err != nil || len(adm) != 0 {
		t.Fatalf("every key paused: admitted %d (%v)", len(adm), err)
	}
	if p := s.Paused(ctx); !strings.HasPrefix(p[model], "every key is paused") {
		t.Fatalf("every key paused: Paused says %v", p)
	}
	if err := s.ResumeKey(ctx, model, 0); err != nil {
		t.Fatal(err)
	}
	adm, _, err = s.Admit(ctx, model, 10)
	if err != nil || len(adm) != 2 || adm[0].Key != 0 || adm[1].Key != 0 {
		t.Fatalf("key 0 resumed: admitted %+v (%v), want the last two on key 0", adm, err)
	}
}

// With one key the layout is the single bucket's: the state key is the
// model's as before, a job's key is 0, and pausing the key pauses the
// model.
func TestOneKeyAsBefore(t *testing.T) {
	ctx := context.Background()
	s, b, _, model := newKeyed(t, 1, ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 1000, Period: time.Second})
	if b.StateKey() != b.Tag()+":state" || b.Keys() != 1 {
		t.Fatalf("one key: state %s, keys %d", b.StateKey(), b.Keys())
	}
	registerN(t, s, model, "o", 1, 100)
	adm, _, err := s.Admit(ctx, model, 10)
	if err != nil || len(adm) != 1 || adm[0].Key != 0 {
		t.Fatalf("admitted %+v (%v)", adm, err)
	}
	if err := s.PauseKey(ctx, model, 0, "401", time.Minute); err != nil {
		t.Fatal(err)
	}
	if p := s.Paused(ctx); p[model] != "401" {
		t.Fatalf("one key paused: Paused %v, want the model", p)
	}
}

// A call moves a token bucket's charge to when the provider counts it:
// a bucket that was full at admission is lowered by the refill the
// provider's, still full until the call arrives, did not get; one that
// was not full is left as it is. The start records only that the job
// reached its handler: the bucket is left for the call to correct.
func TestCallingMovesBucketCharge(t *testing.T) {
	ctx := context.Background()
	s, b, clk, model := newKeyed(t, 1, ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 1000, Period: time.Second})
	step := func(id string, tokens, before, after int64) {
		t.Helper()
		registerN(t, s, model, id, 1, tokens)
		adm, _, err := s.Admit(ctx, model, 1)
		if err != nil || len(adm) != 1 {
			t.Fatalf("admitted %+v (%v)", adm, err)
		}
		clk.advance(100 * time.Millisecond) // ours refills 100 tokens
		if got, _, _ := b.Available(ctx); got.Tokens != before {
			t.Fatalf("%s before its start: %d tokens, want %d", id, got.Tokens, before)
		}
		if err := s.Started(ctx, model, adm[0].ID); err != nil {
			t.Fatal(err)
		}
		if got, _, _ := b.Available(ctx); got.Tokens != before {
			t.Fatalf("%s after its start: %d tokens, want %d (the start moves nothing)", id, got.Tokens, before)
		}
		if st, _ := s.Stats(ctx, model); st.Released != 0 {
			t.Fatalf("%s after its start: %d released, want 0", id, st.Released)
		}
		if err := s.Calling(ctx, model, adm[0].ID); err != nil {
			t.Fatal(err)
		}
		if got, _, _ := b.Available(ctx); got.Tokens != after {
			t.Fatalf("%s after its call: %d tokens, want %d", id, got.Tokens, after)
		}
	}
	// full at admission: the provider's bucket stays full until the call
	// arrives, then holds 1000 - 600
	step("full", 600, 500, 400)
	// 400 left: admitted at 100, refilled to 200 by the call, as the
	// provider's (not full meanwhile)
	step("partial", 300, 200, 200)
}

// TestCallingOfABurstFromFull: two jobs admitted at once from a full
// bucket. The provider's bucket stays full until the first call arrives
// and has not seen the second then; ours counted refill since the
// admission for both. At the first call ours must hold what the provider
// holds less what it has not seen yet; the second call changes nothing
// more. Both jobs started before either called (their handlers prepare
// side by side): the starts change nothing.
func TestCallingOfABurstFromFull(t *testing.T) {
	ctx := context.Background()
	s, b, clk, model := newKeyed(t, 1, ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 1000, Period: time.Second})
	registerN(t, s, model, "burst", 2, 300)
	adm, _, err := s.Admit(ctx, model, 2)
	if err != nil || len(adm) != 2 {
		t.Fatalf("admitted %+v (%v)", adm, err)
	}
	left := func() int64 { return tokensLeft(t, b)[0] }
	clk.advance(200 * time.Millisecond) // ours: 400 + 200
	for _, a := range adm {
		if err := s.Started(ctx, model, a.ID); err != nil {
			t.Fatal(err)
		}
	}
	if got := left(); got != 600 {
		t.Fatalf("after the starts: %d tokens, want 600 (a start moves nothing)", got)
	}
	if err := s.Calling(ctx, model, adm[0].ID); err != nil {
		t.Fatal(err)
	}
	// the provider: full until now, 1000 - 300 = 700, the second job
	// (300) not seen yet: ours 400, not 600 (nor 600 less nothing, as a
	// correction for the calling job alone would leave it)
	if got := left(); got != 400 {
		t.Fatalf("after the first call: %d tokens, want 400", got)
	}
	clk.advance(100 * time.Millisecond)
	if err := s.Calling(ctx, model, adm[1].ID); err != nil {
		t.Fatal(err)
	}
	// the provider: 700 + 100 - 300 = 500; ours refilled to 500 already
	if got := left(); got != 500 {
		t.Fatalf("after the second call: %d tokens, want 500", got)
	}
	// a second call of the same job (a rerun) changes nothing
	if err := s.Calling(ctx, model, adm[1].ID); err != nil {
		t.Fatal(err)
	}
	if got := left(); got != 500 {
		t.Fatalf("after a rerun's call: %d tokens, want 500", got)
	}
}

// TestKeyOrderClaimed: a process listing a model's keys in another order
// than a running one is refused, naming the model and both orders by
// hash (never a key); the same order is accepted and renews the claim;
// once the claim is gone, the new order may take it.
func TestKeyOrderClaimed(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	model := fmt.Sprintf("order-%d", time.Now().UnixNano())
	sched := func(keys ...string) *admission.Scheduler {
		t.Helper()
		b, err := ratelimit.NewKeyedBucket(rdb, model, keys, ratelimit.Limits{RequestsPerPeriod: 10, TokensPerPeriod: 1000, Period: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		s, err := admission.New(redis.UniversalClient(rdb), map[string]*ratelimit.Bucket{model: b}, nil, nil, admission.Config{}, discard)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := sched("sk-order-a", "sk-order-b")
	if err := first.ClaimKeyOrder(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sched("sk-order-a", "sk-order-b").ClaimKeyOrder(ctx); err != nil {
		t.Fatalf("the same order refused: %v", err)
	}
	err := sched("sk-order-b", "sk-order-a").ClaimKeyOrder(ctx)
	if !errors.Is(err, admission.ErrKeyOrder) || !strings.Contains(err.Error(), model) ||
		!strings.Contains(err.Error(), ratelimit.KeyHash("sk-order-b")+","+ratelimit.KeyHash("sk-order-a")) {
		t.Fatalf("the swapped order: %v", err)
	}
	if strings.Contains(err.Error(), "sk-order") {
		t.Fatal("a key reached the error")
	}
	if ttl := rdb.TTL(ctx, "prq:keyorder:"+model).Val(); ttl <= 0 || ttl > 2*time.Minute {
		t.Fatalf("the claim's ttl is %s, want up to 2m", ttl)
	}
	rdb.Del(ctx, "prq:keyorder:"+model)
	if err := sched("sk-order-b", "sk-order-a").ClaimKeyOrder(ctx); err != nil {
		t.Fatalf("the new order after the old claim is gone: %v", err)
	}
}

// TestCallOfABurstFromFull: two jobs admitted at once from full and both
// started; while their handlers prepare the calls ours refills and the
// provider's, capped at full with neither call seen, does not. At the
// first call the bucket comes down to what the provider will hold once
// both arrive (full less both), not what the starts left.
func TestCallOfABurstFromFull(t *testing.T) {
	ctx := context.Background()
	s, b, clk, model := newKeyed(t, 1, ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 1000, Period: time.Second})
	registerN(t, s, model, "burst", 2, 300)
	adm, _, err := s.Admit(ctx, model, 2)
	if err != nil || len(adm) != 2 {
		t.Fatalf("admitted %+v (%v)", adm, err)
	}
	for _, a := range adm {
		if err := s.Started(ctx, model, a.ID); err != nil {
			t.Fatal(err)
		}
	}
	clk.advance(200 * time.Millisecond) // ours: 400 + 200
	if err := s.Calling(ctx, model, adm[0].ID); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := b.Available(ctx); got.Tokens != 400 {
		t.Fatalf("at the first call: %d tokens, want 400 (full less both calls not yet seen)", got.Tokens)
	}
	clk.advance(100 * time.Millisecond)
	if err := s.Calling(ctx, model, adm[1].ID); err != nil {
		t.Fatal(err)
	}
	// the provider: 1000 - 300 at the first call, + 100 refill, - 300
	if got, _, _ := b.Available(ctx); got.Tokens != 500 {
		t.Fatalf("at the second call: %d tokens, want 500", got.Tokens)
	}
}

// TestCallHeldBelowFullBySendLag: the call's way to the provider is
// refill a full provider bucket wastes and ours counts. With SendLag
// 100ms of a 1000-per-second limit, a bucket full at the call of a
// 300-token job is held at full less the job less 100 (its start moved
// nothing); at saturation (far from full) nothing changes.
func TestCallHeldBelowFullBySendLag(t *testing.T) {
	ctx := context.Background()
	s, b, clk, model := newKeyedConfig(t, 1, ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 1000, Period: time.Second},
		admission.Config{SendLag: 100 * time.Millisecond})
	left := func() int64 { return tokensLeft(t, b)[0] }
	registerN(t, s, model, "lag", 1, 300)
	adm, _, err := s.Admit(ctx, model, 1)
	if err != nil || len(adm) != 1 {
		t.Fatalf("admitted %+v (%v)", adm, err)
	}
	if err := s.Started(ctx, model, adm[0].ID); err != nil {
		t.Fatal(err)
	}
	if got := left(); got != 700 {
		t.Fatalf("after the start: %d tokens, want 700 (a start moves nothing)", got)
	}
	clk.advance(300 * time.Millisecond) // ours: full
	if err := s.Calling(ctx, model, adm[0].ID); err != nil {
		t.Fatal(err)
	}
	if got := left(); got != 600 {
		t.Fatalf("at the call: %d tokens, want 600 (1000 - 300 - 100 of send lag)", got)
	}
	// far from full (the provider's bucket, with the calls it has not
	// seen yet, at least the lag's refill below full): a burst of three
	// more, started and called at once, leaves the bucket where
	// admission put it
	registerN(t, s, model, "sat", 3, 300)
	clk.advance(300 * time.Millisecond) // ours: 900
	adm, _, err = s.Admit(ctx, model, 3)
	if err != nil || len(adm) != 3 {
		t.Fatalf("admitted %+v (%v)", adm, err)
	}
	if got := left(); got != 0 {
		t.Fatalf("after the burst: %d tokens, want 0", got)
	}
	for _, a := range adm {
		if err := s.Started(ctx, model, a.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.Calling(ctx, model, a.ID); err != nil {
			t.Fatal(err)
		}
	}
	if got := left(); got != 0 {
		t.Fatalf("a saturated bucket after the calls: %d tokens, want 0 (unchanged)", got)
	}
}

// TestBatchNearTheBurst: a batch ticket that fits the burst but not the
// burst less chat's share (980 of 1,000, share 5%) is admitted from a
// full bucket: chat's floor never makes a job that fits the burst wait
// forever.
func TestBatchNearTheBurst(t *testing.T) {
	for _, limiter := range []ratelimit.Limiter{ratelimit.LimiterBucket, ratelimit.LimiterWindow} {
		t.Run(string(limiter), func(t *testing.T) {
			ctx := context.Background()
			s, _, _, model := newKeyedConfig(t, 1, ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 1000, Period: time.Second, Limiter: limiter},
				admission.Config{SendLag: -1, ChatShare: 0.05})
			chatUses(t, s, model) // a window keeps chat's share only then
			registerN(t, s, model, "big", 1, 980)
			adm, wait, err := s.Admit(ctx, model, 1)
			if err != nil || len(adm) != 1 {
				t.Fatalf("admitted %+v, wait %s (%v): a job of 980 under a burst of 1,000 must not wait for more than the burst", adm, wait, err)
			}
		})
	}
}
