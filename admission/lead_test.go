package admission_test

import (
	"context"
	"crypto/sha1"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// attempts counts the admit script's runs.
type attempts struct{ n atomic.Int64 }

// admitSHA is the admit script's SHA-1, as EVALSHA names it.
var admitSHA = func() string {
	for sha, name := range admission.ScriptHashes() {
		if name == "admission admit" {
			return sha
		}
	}
	panic("admission names no admit script")
}()

func (a *attempts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (a *attempts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (a *attempts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 {
			src, _ := args[1].(string)
			if (cmd.Name() == "evalsha" && src == admitSHA) || (cmd.Name() == "eval" && fmt.Sprintf("%x", sha1.Sum([]byte(src))) == admitSHA) {
				a.n.Add(1)
			}
		}
		return next(ctx, cmd)
	}
}

// leadSetup is one Redis, one model with room to spare, and a scheduler
// whose admissions arrive on a channel.
func leadSetup(t *testing.T) (*admission.Scheduler, *attempts, chan string, func(i int)) {
	t.Helper()
	srv := redistest.New(t)
	rdb := srv.Client(t)
	cnt := &attempts{}
	rdb.AddHook(cnt)
	b, _ := ratelimit.NewBucket(rdb, "lead", "sk", mpLimits)
	s, err := admission.New(rdb, map[string]*ratelimit.Bucket{"lead": b}, nil, nil, admission.Config{}, discard)
	if err != nil {
		t.Fatal(err)
	}
	admitted := make(chan string, 64)
	s.Observe = func(a admission.Admitted) { admitted <- a.ID }
	register := func(i int) {
		tk := admission.Ticket{ID: "t" + strconv.Itoa(i), Queue: "paid", Model: "lead", Class: "paid", Tenant: "1", Index: i, Total: 100, Tokens: 10}
		if _, err := s.Register(context.Background(), tk); err != nil {
			t.Fatal(err)
		}
	}
	return s, cnt, admitted, register
}

func waitAdmitted(t *testing.T, admitted <-chan string, id string) {
	t.Helper()
	select {
	case got := <-admitted:
		if got != id {
			t.Fatalf("admitted %s, want %s", got, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s was never admitted", id)
	}
}

// Two processes' loops (two Runs) with room: new tickets are admitted by
// one attempt each, the leader's; the other loop, far behind it, does not
// attempt once it has heard the leader. Before the loops shared the work,
// every loop attempted on every ticket, the one that admitted it again.
func TestOnlyTheLeaderAttempts(t *testing.T) {
	s, cnt, admitted, register := leadSetup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rc := admission.RunConfig{Capacity: func() int { return 4 }, MaxSleep: time.Hour, IdleSleep: time.Hour, Behind: time.Hour}
	go s.Run(ctx, rc)
	go s.Run(ctx, rc)
	for deadline := time.Now().Add(30 * time.Second); cnt.n.Load() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the loops never made their first attempts")
		}
	}
	// the first tickets settle who leads (both loops attempted at start)
	for i := 0; i < 3; i++ {
		register(i)
		waitAdmitted(t, admitted, "t"+strconv.Itoa(i))
	}
	before := cnt.n.Load()
	const n = 20
	for i := 3; i < 3+n; i++ {
		register(i)
		waitAdmitted(t, admitted, "t"+strconv.Itoa(i))
	}
	// a leader change in flight at the start may cost an attempt or two;
	// every loop attempting on every ticket would cost at least 2n
	if got := cnt.n.Load() - before; got > n+3 {
		t.Fatalf("%d admission attempts for %d tickets, want about one each", got, n)
	}
}

// The leader has no free slot: another process's loop, which would not
// look again for an hour on its own, still admits a new ticket.
func TestOthersAdmitWhenTheLeaderHasNoSlots(t *testing.T) {
	s, _, admitted, register := leadSetup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var capA, capB atomic.Int64
	capA.Store(4)
	go s.Run(ctx, admission.RunConfig{Capacity: func() int { return int(capA.Load()) }, MaxSleep: time.Hour, IdleSleep: time.Hour})
	// B never polls for a slot on its own (Poll), nor looks again (MaxSleep)
	go s.Run(ctx, admission.RunConfig{Capacity: func() int { return int(capB.Load()) }, MaxSleep: time.Hour, IdleSleep: time.Hour, Poll: time.Hour})
	register(0)
	waitAdmitted(t, admitted, "t0") // by A, the only one with slots: A leads
	capA.Store(0)
	capB.Store(4)
	register(1)
	waitAdmitted(t, admitted, "t1")
}

// A ticket delayed (a retry's backoff) is admitted when it comes due,
// although no loop would look again for an hour on its own: RegisterAt
// tells the loops when.
func TestDelayedTicketWakesTheLoops(t *testing.T) {
	s, _, admitted, register := leadSetup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rc := admission.RunConfig{Capacity: func() int { return 4 }, MaxSleep: time.Hour, IdleSleep: time.Hour}
	go s.Run(ctx, rc)
	go s.Run(ctx, rc)
	register(0)
	waitAdmitted(t, admitted, "t0")
	tk := admission.Ticket{ID: "later", Queue: "paid", Model: "lead", Class: "paid", Tenant: "1", Index: 1, Total: 100, Tokens: 10}
	if err := s.RegisterAt(ctx, tk, time.Now().Add(100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	waitAdmitted(t, admitted, "later")
}
