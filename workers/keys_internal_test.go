package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
)

// stepClock is one clock for admission, the buckets and the fake
// provider: it moves only when the test steps it, so a run of many
// simulated minutes is exact and takes no wall time to speak of.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stepClock) step(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// keyRig is admission over one model with several API keys, the caller,
// and a fake provider that limits each key exactly by itself, all on
// one stepped clock.
type keyRig struct {
	t      *testing.T
	model  string
	clock  *stepClock
	fake   *fakeopenai.Server
	sched  *admission.Scheduler
	caller *Caller
	limits ratelimit.Limits
	seq    int
	// calls counts the successful calls; admitted the admissions per key.
	calls    int
	admitted map[int]int
	// waiting are the jobs registered and not yet served, by id;
	// started those whose handler started; calling those admitted
	// whose call waits for room.
	waiting   map[string]callSpec
	started   map[string]bool
	calling   []pendingCall
	callWaits int
}

// pendingCall is an admitted job whose call waits until due.
type pendingCall struct {
	a   admission.Admitted
	due time.Time
}

// newKeyRig configures prq with keys; the fake accepts only valid (nil:
// every key of keys).
func newKeyRig(t *testing.T, model string, keys, valid []string, limits ratelimit.Limits) *keyRig {
	t.Helper()
	if valid == nil {
		valid = keys
	}
	rdb := redistest.Shared(t).Client(t)
	clock := &stepClock{t: time.UnixMilli(1_900_000_000_000)}
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: model, RPM: limits.RequestsPerPeriod, TPM: limits.TokensPerPeriod}},
		Period: limits.Period, Keys: valid, Record: true, Now: clock.Now, Limiter: string(limits.Limiter)})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	b, err := ratelimit.NewKeyedBucket(rdb, model, keys, limits)
	if err != nil {
		t.Fatal(err)
	}
	b.NowFunc = clock.Now
	log := slog.New(slog.DiscardHandler)
	sched, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: b}, nil, nil, admission.Config{NowFunc: clock.Now}, log)
	if err != nil {
		t.Fatal(err)
	}
	clients := make([]llm.Completer, len(keys))
	for i, k := range keys {
		clients[i] = llm.New(k, srv.URL+"/v1", 10*time.Second, nil)
	}
	c, err := NewCaller(CallerConfig{LLM: llm.NewRouter(map[string][]llm.Completer{model: clients}), Ledger: sched, Requeue: sched, Provider: sched, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	return &keyRig{t: t, model: model, clock: clock, fake: fake, sched: sched, caller: c, limits: limits, admitted: map[int]int{}, waiting: map[string]callSpec{}, started: map[string]bool{}}
}

// job returns a summary job whose prompt costs cost tokens by the
// provider's rule (ceil(chars/4) + the output cap), exactly as the fake
// charges it.
func (r *keyRig) job(cost int64) callSpec {
	r.seq++
	const maxOut = 200
	p := prompt{system: "Summarise.", user: strings.Repeat("x", int(4*(cost-maxOut))-len("Summarise."))}
	req := p.request(Model{Model: llmcall.Model{Name: r.model}}, maxOut)
	p.estimate = ratelimit.EstimateOpenAI(req.Messages(), maxOut)
	if p.estimate != cost {
		r.t.Fatalf("prompt costs %d, want %d", p.estimate, cost)
	}
	return callSpec{
		ticket: admission.Ticket{ID: fmt.Sprintf("%s-job-%d", r.model, r.seq), Queue: "llm", Model: r.model, Class: string(jobs.TierPaid),
			Tenant: fmt.Sprintf("inst%d", r.seq%5), Tokens: p.estimate},
		kind: jobs.KindSummary, tier: jobs.TierPaid, prompt: p, model: Model{Model: llmcall.Model{Name: r.model, MaxOutput: maxOut}}, maxRetry: 5,
	}
}

// run keeps backlog jobs waiting and steps the clock by step for the
// simulated span: each step admits what the buckets admit and makes the
// admitted calls (start, call with the admitted key, settle, header
// sync), as the workers do.
func (r *keyRig) run(ctx context.Context, span, step time.Duration, backlog int, cost func(i int) int64) {
	r.t.Helper()
	waiting := r.waiting
	for elapsed := time.Duration(0); elapsed < span; elapsed += step {
		for len(waiting) < backlog {
			s := r.job(cost(r.seq))
			if _, err := r.sched.Register(ctx, s.ticket); err != nil {
				r.t.Fatal(err)
			}
			waiting[s.ticket.ID] = s
		}
		adm, _, err := r.sched.Admit(ctx, r.model, 64)
		if err != nil {
			r.t.Fatal(err)
		}
		for _, a := range adm {
			if a.Via == "reject" {
				r.t.Fatalf("job %s rejected (%s)", a.ID, a.Dim)
			}
			r.admitted[a.Key]++
		}
		// jobs admitted earlier whose call waited come first, as a
		// worker's sleep in Calling would end
		var starts []admission.Admitted
		now, later := r.clock.Now(), r.calling[:0:0]
		for _, p := range r.calling {
			if p.due.After(now) {
				later = append(later, p)
			} else {
				starts = append(starts, p.a)
			}
		}
		r.calling = later
		starts = append(starts, adm...)
		for _, a := range starts {
			s, ok := waiting[a.ID]
			if !ok {
				r.t.Fatalf("admitted %s, which is not waiting", a.ID)
			}
			// a window's call may wait for the room admission looked
			// ahead to (Calling sleeps; on this clock, a later step);
			// calling again in the call is a no-op
			if !r.started[a.ID] {
				r.started[a.ID] = true
				if err := r.sched.Started(ctx, r.model, a.ID); err != nil {
					r.t.Fatal(err)
				}
			}
			if wait, err := r.sched.TryCalling(ctx, r.model, a.ID); err != nil {
				r.t.Fatal(err)
			} else if wait > 0 {
				r.callWaits++
				r.calling = append(r.calling, pendingCall{a: a, due: now.Add(wait)})
				continue
			}
			_, err := r.caller.call(ctx, s)
			switch {
			case err == nil:
				r.calls++
				delete(waiting, a.ID)
			case errors.Is(err, errBackToAdmission):
				// registered again: it waits in the order once more
			default:
				r.t.Fatalf("job %s: %v", a.ID, err)
			}
		}
		r.clock.step(step)
	}
}

// byKey splits the fake's admissions by the key they were charged to.
func (r *keyRig) byKey(keys []string) [][]ratelimit.Admission {
	out := make([][]ratelimit.Admission, len(keys))
	idx := map[string]int{}
	for i, k := range keys {
		idx[fakeopenai.KeyLabel(k)] = i
	}
	for _, a := range r.fake.Admissions(r.model) {
		i, ok := idx[a.Key]
		if !ok {
			r.t.Fatalf("the fake admitted a call on an unknown key %s", a.Key)
		}
		out[i] = append(out[i], ratelimit.Admission{At: a.At, Cost: a.Cost})
	}
	return out
}

func ones(adm []ratelimit.Admission) []ratelimit.Admission {
	out := make([]ratelimit.Admission, len(adm))
	for i, a := range adm {
		out[i] = ratelimit.Admission{At: a.At, Cost: 1}
	}
	return out
}

// Three keys on one model: admission charges each job to a key whose
// bucket has room, the call goes out with that key, and the provider,
// which limits every key by itself, sees each key's load within that
// key's limit (the interval rule holds per key, requests and tokens)
// while the model's total is close to three keys' worth, with no 429.
// Under a window limiter (the fake's and prq's), every window of each
// key holds at most its limit, and three keys carry three times what
// one key alone carries on the same workload.
func TestThreeKeysTripleTheLimit(t *testing.T) {
	t.Parallel()
	t.Run(string(ratelimit.LimiterBucket), func(t *testing.T) {
		t.Parallel()
		threeKeys(t, ratelimit.LimiterBucket)
	})
	t.Run(string(ratelimit.LimiterWindow), func(t *testing.T) {
		t.Parallel()
		// the margin is set: measured, it follows the calls' real way to
		// the provider, which a loaded machine lengthens (more for three
		// keys' calls than one's), on a clock that is stepped; the
		// measured margin has its own tests (ratelimit, admission). The
		// one-key baseline runs beside the three keys, and the ratio is
		// taken once both are done
		limits := windowKeyLimits
		var three, one ratelimit.WindowReport
		t.Run("three keys", func(t *testing.T) {
			t.Parallel()
			three = threeKeys(t, ratelimit.LimiterWindow)
		})
		t.Run("one key", func(t *testing.T) {
			t.Parallel()
			_, per := keyLoad(t, 1, limits, 10*time.Minute)
			one = ratelimit.CheckWindows(per[0], limits.TokensPerPeriod, limits.Period)
		})
		t.Cleanup(func() {
			if one.Total == 0 || three.Total == 0 {
				return // a subtest failed before its figure
			}
			ratio := float64(three.Total) / float64(one.Total)
			t.Logf("one key alone: %d calls, %d tokens, mean window fill %.4f; three keys carry %.3fx that", one.Admissions, one.Total, one.Utilisation, ratio)
			if ratio < 2.9 {
				t.Errorf("three keys carried %.3fx one key's load, want >= 2.9", ratio)
			}
		})
	})
}

// keyLoad runs the rig with n keys on one workload: jobs of 500 to 3000
// tokens, a backlog that never runs dry, span simulated in steps of
// 200ms. It returns the rig and the provider's admissions per key.
func keyLoad(t *testing.T, n int, limits ratelimit.Limits, span time.Duration) (*keyRig, [][]ratelimit.Admission) {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("sk-load-%s-%d-of-%d", limits.Limiter, i, n)
	}
	r := newKeyRig(t, fmt.Sprintf("gpt-keys-%s-%d", limits.Limiter, n), keys, nil, limits)
	r.run(context.Background(), span, 200*time.Millisecond, 150, func(i int) int64 { return 500 + int64(i*733%2501) })
	if st := r.fake.Stats()[r.model]; st.RateLimited != 0 {
		t.Errorf("%d keys: the provider answered %d 429s", n, st.RateLimited)
	}
	per := r.byKey(keys)
	var got int
	for i := range keys {
		got += len(per[i])
		// jobs admitted whose start still waits made no call yet
		pending := 0
		for _, p := range r.calling {
			if p.a.Key == i {
				pending++
			}
		}
		if r.admitted[i]-pending != len(per[i]) {
			t.Errorf("admission charged key %d %d times (%d not started); the provider saw %d calls with it", i, r.admitted[i], pending, len(per[i]))
		}
	}
	if r.calls != got {
		t.Errorf("%d calls succeeded, the provider admitted %d", r.calls, got)
	}
	return r, per
}

// threeKeys runs three keys on one model and checks each key's load;
// it returns the model's windows (a window limiter's, to compare with
// one key's).
// windowKeyLimits are the window limiter's in TestThreeKeysTripleTheLimit:
// its margin set (100 ms), so the load's fill does not follow the
// machine's speed.
var windowKeyLimits = ratelimit.Limits{RequestsPerPeriod: 120, TokensPerPeriod: 40_000, Period: time.Minute, Limiter: ratelimit.LimiterWindow, WindowMargin: 100 * time.Millisecond}

func threeKeys(t *testing.T, limiter ratelimit.Limiter) ratelimit.WindowReport {
	limits := ratelimit.Limits{RequestsPerPeriod: 120, TokensPerPeriod: 40_000, Period: time.Minute, Limiter: limiter}
	if limiter == ratelimit.LimiterWindow {
		limits = windowKeyLimits
	}
	span := 10 * time.Minute
	r, per := keyLoad(t, 3, limits, span)
	var all []ratelimit.Admission
	for i, adm := range per {
		if limiter == ratelimit.LimiterWindow {
			tok := ratelimit.CheckWindows(adm, limits.TokensPerPeriod, limits.Period)
			req := ratelimit.CheckWindows(ones(adm), limits.RequestsPerPeriod, limits.Period)
			t.Logf("key %d: %d calls, %d tokens; fullest window %.4f of the key's tokens, %.4f of its requests; mean window fill %.4f",
				i, tok.Admissions, tok.Total, tok.Worst, req.Worst, tok.Utilisation)
			if tok.Violations != 0 || req.Violations != 0 {
				t.Errorf("key %d: %d token and %d request windows over the key's limit", i, tok.Violations, req.Violations)
			}
		} else {
			tok := ratelimit.CheckIntervals(adm, limits.TokensPerPeriod, limits.Period, limits.TokensPerPeriod)
			req := ratelimit.CheckIntervals(ones(adm), limits.RequestsPerPeriod, limits.Period, limits.RequestsPerPeriod)
			t.Logf("key %d: %d calls, %d tokens; tokens: worst interval %.4f of the limit, utilisation %.4f; requests: worst %.4f",
				i, tok.Admissions, tok.Total, tok.WorstRatio, tok.Utilisation, req.WorstRatio)
			if tok.Violations != 0 || req.Violations != 0 {
				t.Errorf("key %d: %d token and %d request intervals over the key's limit", i, tok.Violations, req.Violations)
			}
			// spread: each key carries its share
			if tok.Utilisation < 0.95 {
				t.Errorf("key %d used %.3f of its limit, want >= 0.95", i, tok.Utilisation)
			}
		}
		all = append(all, adm...)
	}
	total := ratelimit.CheckIntervals(all, limits.TokensPerPeriod, limits.Period, limits.TokensPerPeriod)
	t.Logf("three keys: %d calls, %d tokens over %s; admissions per key %v; calls that waited %d; 429s 0",
		total.Admissions, total.Total, all[len(all)-1].At.Sub(all[0].At), r.admitted, r.callWaits)
	if limiter == ratelimit.LimiterBucket {
		// the model's load against one key's limit: its burst plus its
		// rate over the run
		t.Logf("three keys admitted %.3fx one key's limit", total.Utilisation)
		if total.Utilisation < 2.9 {
			t.Errorf("three keys admitted %.3fx one key's limit, want >= 2.9", total.Utilisation)
		}
		return ratelimit.WindowReport{}
	}
	// a window limiter keeps a margin and admits ahead of starts: one
	// key alone fills its windows to a little less than its limit, and
	// three keys must carry three times that (the caller compares)
	return ratelimit.CheckWindows(all, limits.TokensPerPeriod, limits.Period)
}

// A key that fails authentication is paused alone: its job goes back to
// admission and is served by another key, the model is not paused, and
// no later job is charged to the bad key while the others serve.
func TestBadKeyPausedAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keys := []string{"sk-pause-a", "sk-pause-revoked", "sk-pause-c"}
	limits := ratelimit.Limits{RequestsPerPeriod: 120, TokensPerPeriod: 40_000, Period: time.Minute}
	r := newKeyRig(t, "gpt-keys-pause", keys, []string{keys[0], keys[2]}, limits)
	// the first admissions spread over the three keys: key 1 meets the 401
	r.run(ctx, time.Second, 200*time.Millisecond, 30, func(int) int64 { return 1000 })
	if r.admitted[1] == 0 {
		t.Fatalf("no job was charged to key 1 (admissions per key %v): the test cannot see the pause", r.admitted)
	}
	pk := r.sched.PausedKeys(ctx, r.model)
	if len(pk) != 1 || pk[1] == "" {
		t.Fatalf("paused keys %v, want key 1 alone", pk)
	}
	if p := r.sched.Paused(ctx); len(p) != 0 {
		t.Errorf("paused models %v: the model must keep serving on its other keys", p)
	}
	before := r.admitted[1]
	r.run(ctx, 3*time.Minute, 200*time.Millisecond, 30, func(int) int64 { return 1000 })
	if r.admitted[1] != before {
		t.Errorf("%d jobs were charged to the paused key", r.admitted[1]-before)
	}
	// two keys of 40 jobs (of 1000 tokens) a minute, over 3 minutes and
	// a second, with their burst: 2 x (40 + 3 x 40) = 320
	if r.calls < 310 {
		t.Errorf("the two good keys served %d jobs, want >= 310 of 320 (admissions per key %v)", r.calls, r.admitted)
	}
	per := r.byKey(keys)
	if len(per[1]) != 0 {
		t.Errorf("the provider admitted %d calls with the revoked key", len(per[1]))
	}
	if st := r.fake.Stats()[r.model]; st.RateLimited != 0 {
		t.Errorf("the provider answered %d 429s", st.RateLimited)
	}
	t.Logf("admissions per key %v, calls served %d, paused %v", r.admitted, r.calls, pk)
	// resumed, the key serves again
	if err := r.sched.ResumeKey(ctx, r.model, 1); err != nil {
		t.Fatal(err)
	}
	if pk := r.sched.PausedKeys(ctx, r.model); len(pk) != 0 {
		t.Errorf("paused keys after resume: %v", pk)
	}
}

// A flex refusal hit no limit: the job's reservation is refunded and the
// key's bucket is left as it was (a 429's penalty would stop every job
// on the key until the provider's reset); the next call, at the standard
// tier, goes out at once.
func TestFlexRefusalLeavesTheBucket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	model := fmt.Sprintf("gpt-flex-%d", time.Now().UnixNano())
	limits := ratelimit.Limits{RequestsPerPeriod: 120, TokensPerPeriod: 40_000, Period: time.Minute}
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: model, RPM: 120, TPM: 40_000, Flex: true}}, Period: time.Minute, Keys: []string{"sk-flex"}})
	fake.SetFaults(fakeopenai.Faults{FlexRefuseEvery: 1})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	b, err := ratelimit.NewBucket(rdb, model, "sk-flex", limits)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	sched, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: b}, nil, nil, admission.Config{}, log)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCaller(CallerConfig{LLM: llm.New("sk-flex", srv.URL+"/v1", 10*time.Second, nil), Ledger: sched, Requeue: sched, Provider: sched,
		Tiers: map[jobs.Tier]TierSpec{jobs.TierPaid: {Flex: true}}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	r := &keyRig{t: t, model: model}
	admit := func() callSpec {
		t.Helper()
		s := r.job(1000)
		if _, err := sched.Register(ctx, s.ticket); err != nil {
			t.Fatal(err)
		}
		if a, _, err := sched.Admit(ctx, model, 1); err != nil || len(a) != 1 {
			t.Fatalf("admit: %v %v", a, err)
		}
		if err := sched.Started(ctx, model, s.ticket.ID); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := admit()
	s.flex = true
	_, err = c.call(ctx, s)
	var fr *ended
	if !errors.As(err, &fr) || fr.step != endFlex {
		t.Fatalf("a refused flex call: %v, want a flex refusal", err)
	}
	avail, _, err := b.Available(ctx)
	if err != nil || avail.Tokens < limits.TokensPerPeriod-2000 || avail.Requests < limits.RequestsPerPeriod-2 {
		t.Fatalf("the bucket after a refusal: %+v (%v), want it about full (no penalty)", avail, err)
	}
	s = admit()
	if _, err := c.call(ctx, s); err != nil {
		t.Fatalf("the standard call after: %v", err)
	}
	if st := fake.Stats()[model]; st.FlexRefused != 1 || st.RateLimited != 0 {
		t.Fatalf("fake stats %+v: want one refusal, no 429 for a limit", st)
	}
}
