package workers_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/internal/redistest"
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
func TestPacerServesChatFirstAcrossProcesses(t *testing.T) {
	c := newManualClock()
	lane := newLane(t, c, 3)
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
