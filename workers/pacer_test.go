package workers_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/workers"
)

// manualClock is a clock that moves only when the test says; it counts
// the writers asleep on it and those done, so a test can wait until every
// writer has acted on the last step.
type manualClock struct {
	mu     sync.Mutex
	cond   *sync.Cond
	now    time.Time
	timers []manualTimer
	done   int
}

type manualTimer struct {
	at time.Time
	ch chan time.Time
}

func newManualClock() *manualClock {
	c := &manualClock{now: time.UnixMilli(1_800_000_000_000)}
	c.cond = sync.NewCond(&c.mu)
	return c
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.timers = append(c.timers, manualTimer{at: c.now.Add(d), ch: ch})
	c.cond.Broadcast()
	return ch
}

// Advance moves the clock and fires the timers due.
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- c.now
	}
	c.timers = kept
}

func (c *manualClock) finished() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done++
	c.cond.Broadcast()
}

// quiet waits until n writers are each asleep or finished.
func (c *manualClock) quiet(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.timers)+c.done < n {
		c.cond.Wait()
	}
}

func newLane(t *testing.T, c *manualClock, processes int) []*workers.Pacer {
	t.Helper()
	var out []*workers.Pacer
	for range processes { // a client each: as many processes
		p := workers.NewPacer(redistest.Shared(t).Client(t), nil)
		p.Wait = time.Hour
		p.NowFunc, p.AfterFunc = c.Now, c.After
		out = append(out, p)
	}
	return out
}

// freshInstallation names a lane no earlier run used (the Redis is shared
// across -count runs, and the clock restarts).
func freshInstallation() int64 { return time.Now().UnixNano() }

type writeLog struct {
	mu    sync.Mutex
	names []string
	at    []time.Time
}

func (l *writeLog) snapshot() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.at...)
}

func (l *writeLog) write(c *manualClock, name string) func() error {
	return func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.names = append(l.names, name)
		l.at = append(l.at, c.Now())
		return nil
	}
}

// TestPacerServesChatFirstAcrossProcesses: waiting writers take the lane
// chat replies first, then summaries and reviews, then check-run
// decorations (which never hold a result back), each class oldest first.
// (No chat burst here: every write waits its gap.)
func TestPacerServesChatFirstAcrossProcesses(t *testing.T) {
	c := newManualClock()
	lane := newLane(t, c, 3)
	for _, p := range lane {
		p.ChatBurst = 0
	}
	inst := freshInstallation()
	ctx := context.Background()
	var log writeLog
	if err := lane[0].Do(ctx, inst, workers.PublishWrite, log.write(c, "first")); err != nil {
		t.Fatal(err)
	}
	type writer struct {
		name  string
		class workers.WriteClass
	}
	// two check runs and five publications queue behind the first write
	// (in three processes), then a chat reply arrives last: the check
	// runs came first and still go last
	queue := []writer{{"check-0", workers.CheckWrite}, {"check-1", workers.CheckWrite}}
	for i := range 5 {
		queue = append(queue, writer{fmt.Sprint("publish-", i), workers.PublishWrite})
	}
	queue = append(queue, writer{"chat", workers.ChatWrite})
	var wg sync.WaitGroup
	for i, w := range queue {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.finished()
			if err := lane[i%len(lane)].Do(ctx, inst, w.class, log.write(c, w.name)); err != nil {
				t.Error(err)
			}
		}()
		c.quiet(i + 1) // joined the line, in this order
		c.Advance(time.Millisecond)
	}
	for range len(queue) {
		c.Advance(time.Second)
		c.quiet(len(queue))
	}
	wg.Wait()
	want := []string{"first", "chat", "publish-0", "publish-1", "publish-2", "publish-3", "publish-4", "check-0", "check-1"}
	if fmt.Sprint(log.names) != fmt.Sprint(want) {
		t.Fatalf("writes in order %v, want %v", log.names, want)
	}
	for i := 1; i < len(log.at); i++ {
		if gap := log.at[i].Sub(log.at[i-1]); gap < time.Second {
			t.Errorf("%s written %v after %s, want at least the 1s gap", log.names[i], gap, log.names[i-1])
		}
	}
}

func TestPacerDropsAWriterThatStoppedAsking(t *testing.T) {
	c := newManualClock()
	lane := newLane(t, c, 2)
	dead := lane[1]
	dead.ChatBurst = 0 // it heads the line and waits its turn
	asked := make(chan struct{}, 1)
	dead.AfterFunc = func(time.Duration) <-chan time.Time { // never wakes: a process that died
		asked <- struct{}{}
		return nil
	}
	inst := freshInstallation()
	ctx := context.Background()
	var log writeLog
	if err := lane[0].Do(ctx, inst, workers.PublishWrite, log.write(c, "first")); err != nil {
		t.Fatal(err)
	}
	dctx, kill := context.WithCancel(ctx)
	deadDone := make(chan error, 1)
	go func() { deadDone <- dead.Do(dctx, inst, workers.ChatWrite, log.write(c, "dead")) }()
	<-asked // the dead writer heads the line
	joined := c.Now()
	go func() {
		defer c.finished()
		if err := lane[0].Do(ctx, inst, workers.PublishWrite, log.write(c, "live")); err != nil {
			t.Error(err)
		}
	}()
	for step := 0; ; step++ {
		c.quiet(1)
		log.mu.Lock()
		n := len(log.names)
		log.mu.Unlock()
		if n == 2 {
			break
		}
		if step > 20 {
			t.Fatalf("the live writer never wrote; writes %v", log.names)
		}
		c.Advance(time.Second)
	}
	kill()
	if err := <-deadDone; !errors.Is(err, context.Canceled) {
		t.Errorf("dead writer: %v, want context.Canceled", err)
	}
	// the live writer went only once the dead one had been silent 3 beats
	if log.names[1] != "live" || log.at[1].Sub(joined) <= 3*time.Second {
		t.Errorf("writes %v at %v; want live, more than 3 beats after the dead writer asked (%v)", log.names, log.at, joined)
	}
}

func TestPacerHoldsTheLaneAfterARateLimit(t *testing.T) {
	c := newManualClock()
	lane := newLane(t, c, 2)
	inst := freshInstallation()
	ctx := context.Background()
	var log writeLog
	start := c.Now()
	err := lane[0].Do(ctx, inst, workers.PublishWrite, func() error {
		return fmt.Errorf("create review: %w", &ghapp.RateLimitedError{RetryAfter: 5 * time.Second, Secondary: true})
	})
	var ra *workers.RetryAfterError
	if !errors.As(err, &ra) || ra.After != 5*time.Second {
		t.Fatalf("err %v, want a RetryAfterError of 5s", err)
	}
	go func() {
		defer c.finished()
		if err := lane[1].Do(ctx, inst, workers.ChatWrite, log.write(c, "chat")); err != nil {
			t.Error(err)
		}
	}()
	for {
		c.quiet(1)
		log.mu.Lock()
		n := len(log.names)
		log.mu.Unlock()
		if n == 1 {
			break
		}
		c.Advance(500 * time.Millisecond)
	}
	if got := log.at[0].Sub(start); got < 5*time.Second {
		t.Errorf("the next write went %v after the rate limit, want at least GitHub's 5s", got)
	}
}

func TestPacerGivesUpItsPlaceAfterWait(t *testing.T) {
	c := newManualClock()
	lane := newLane(t, c, 1)
	p := lane[0]
	p.Wait = 1500 * time.Millisecond
	inst := freshInstallation()
	ctx := context.Background()
	var log writeLog
	if err := p.Do(ctx, inst, workers.PublishWrite, func() error { return &ghapp.RateLimitedError{RetryAfter: time.Minute} }); err == nil {
		t.Fatal("want the rate limit's error")
	}
	err := p.Do(ctx, inst, workers.ChatWrite, log.write(c, "chat"))
	var ra *workers.RetryAfterError
	if !errors.As(err, &ra) || ra.After != time.Minute {
		t.Fatalf("err %v, want a RetryAfterError of the minute left", err)
	}
	// it left the line: a later writer is not held behind it
	c.Advance(time.Minute)
	if err := p.Do(ctx, inst, workers.PublishWrite, log.write(c, "later")); err != nil || len(log.names) != 1 {
		t.Fatalf("later write: %v, writes %v", err, log.names)
	}
}

// TestPacerLetsChatRepliesRunAheadOfTheGap: right after a publication,
// ChatBurst chat replies go at once and the next waits its gap; the
// publications waiting meanwhile keep their spacing behind the replies,
// so the lane's long-run rate stays one write a gap.
func TestPacerLetsChatRepliesRunAheadOfTheGap(t *testing.T) {
	c := newManualClock()
	lane := newLane(t, c, 2)
	inst := freshInstallation()
	ctx := context.Background()
	var log writeLog
	start := c.Now()
	if err := lane[0].Do(ctx, inst, workers.PublishWrite, log.write(c, "first")); err != nil {
		t.Fatal(err)
	}
	queue := []workers.WriteClass{workers.PublishWrite, workers.PublishWrite}
	for range workers.DefaultChatBurst + 1 {
		queue = append(queue, workers.ChatWrite)
	}
	var wg sync.WaitGroup
	for i, class := range queue {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.finished()
			name := fmt.Sprint("publish-", i)
			if class == workers.ChatWrite {
				name = fmt.Sprint("chat-", i-2)
			}
			if err := lane[i%len(lane)].Do(ctx, inst, class, log.write(c, name)); err != nil {
				t.Error(err)
			}
		}()
		c.quiet(i + 1) // asleep in the line, or written
	}
	for range 40 {
		c.Advance(250 * time.Millisecond)
		c.quiet(len(queue))
	}
	wg.Wait()
	// the two publications joined in the same millisecond: either goes first
	at := map[string]time.Duration{}
	for i, n := range log.names {
		if strings.HasPrefix(n, "publish-") {
			n = fmt.Sprint("publish#", len(at)-6)
		}
		at[n] = log.at[i].Sub(start)
	}
	want := map[string]time.Duration{"first": 0,
		"chat-0": 0, "chat-1": 0, "chat-2": 0, "chat-3": 0, // at once, ahead of the gap
		"chat-4":    time.Second,     // the burst spent: the gap
		"publish#0": 6 * time.Second, // behind every booked slot
		"publish#1": 7 * time.Second,
	}
	if fmt.Sprint(want) != fmt.Sprint(at) {
		t.Fatalf("writes at %v, want %v", at, want)
	}
}

// TestPacerKeepsGitHubsMinute: against the fake GitHub, which refuses an
// installation's 81st content-creating request within a minute, a lane
// kept busy by a publication a second, then hit by 25 chat replies at
// once and a chat reply a second, never meets the limit at the default ChatBurst, and every sliding
// minute holds at most 60 + ChatBurst + 1 writes. A lane letting chat
// run 30 slots ahead does meet it: the test can fail.
func TestPacerKeepsGitHubsMinute(t *testing.T) {
	for _, tc := range []struct {
		name      string
		burst     int
		wantLimit bool
	}{{"default burst", workers.DefaultChatBurst, false}, {"too eager", 30, true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newManualClock()
			c.now = time.Now() // the App's tokens are signed on the real clock
			inst := freshInstallation()
			pr := jobs.PR{Installation: inst, Owner: "acme", Repo: "lane", Number: 1}
			rig := newGHRigWith(t, pr, fakegithub.Config{NowFunc: c.Now}) // GitHub's 80 a minute
			gh, err := rig.app.Client(inst)
			if err != nil {
				t.Fatal(err)
			}
			lane := newLane(t, c, 3)
			for _, p := range lane {
				p.ChatBurst = tc.burst
			}
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			var log writeLog
			var limited atomic.Int32
			var wg sync.WaitGroup
			n := 0
			spawn := func(class workers.WriteClass) {
				i := n
				n++
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer c.finished()
					err := lane[i%len(lane)].Do(ctx, inst, class, func() error {
						if _, err := gh.Comment(ctx, "acme", "lane", 1, fmt.Sprint("write ", i)); err != nil {
							return err
						}
						return log.write(c, fmt.Sprint(i))()
					})
					var ra *workers.RetryAfterError
					if errors.As(err, &ra) {
						limited.Add(1)
					} else if err != nil && !errors.Is(err, context.Canceled) {
						t.Error(err)
					}
				}()
				c.quiet(n)
			}
			const step = 250 * time.Millisecond
			// a publication a second for 75 s; 25 chat replies at 20 s, then
			// one a second
			for s := range 4 * 75 {
				if s%4 == 0 {
					spawn(workers.PublishWrite)
				}
				if s == 4*20 {
					for range 24 {
						spawn(workers.ChatWrite)
					}
				}
				if s >= 4*20 && s%4 == 0 {
					spawn(workers.ChatWrite)
				}
				c.Advance(step)
				c.quiet(n)
			}
			for range 4 * 240 {
				if limited.Load() > 0 || len(log.snapshot()) == n {
					break
				}
				c.Advance(step)
				c.quiet(n)
			}
			stop() // the writers still waiting behind a rate limit's hold
			wg.Wait()
			if got := limited.Load() > 0; got != tc.wantLimit {
				t.Fatalf("GitHub's secondary limit hit %d times, want hit: %v", limited.Load(), tc.wantLimit)
			}
			if tc.wantLimit {
				return
			}
			at := log.snapshot()
			most := 0
			for i := range at {
				j := i
				for j < len(at) && at[j].Sub(at[i]) < time.Minute {
					j++
				}
				most = max(most, j-i)
			}
			if limit := 60 + tc.burst + 1; most > limit {
				t.Fatalf("%d writes within a minute, want at most %d", most, limit)
			}
			t.Logf("%d writes, at most %d within a minute", len(at), most)
		})
	}
}
