package workers

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/ghapp"
)

// WriteClass orders an installation's waiting GitHub writes: a smaller
// class goes first, then the writer that has waited longest.
type WriteClass int

const (
	// ChatWrite is a chat reply: a person is waiting for it.
	ChatWrite WriteClass = iota
	// PublishWrite is a summary comment, a review, or the check run's
	// completion that follows them.
	PublishWrite
	// CheckWrite is a decoration: a check run created queued or its
	// progress. It never holds a result back.
	CheckWrite
)

// Pacer paces an installation's content-creating GitHub calls across
// every process: Gap apart, and after a rate limit nobody writes until
// GitHub's retry time. Writers waiting for
// the lane take it in WriteClass order, then oldest first, whichever
// process they run in.
//
// The lane is a token bucket of rate 1/Gap: a publication or a check run
// waits until a Gap has passed since the lane's last booked slot, while a
// chat reply may run up to ChatBurst slots ahead, so a person's answer
// does not queue behind the replies of others or a review's writes. Any
// span t of an installation's writes holds at most t/Gap + ChatBurst + 1
// of them (65 a minute at the defaults, within GitHub's 80).
type Pacer struct {
	rdb redis.UniversalClient
	log *slog.Logger
	// Gap between writes of one installation. Defaults to 1s (GitHub's advice).
	Gap time.Duration
	// ChatBurst is how many chat replies may go at once right after
	// another write, ahead of the Gap. Defaults to 4.
	ChatBurst int
	// Wait is the longest a job waits for its turn before rescheduling.
	// Defaults to 20s.
	Wait time.Duration
	// Beat is the longest a waiting writer sleeps between asking for its
	// turn; a writer that has not asked for 3 beats (its process died)
	// loses its place. Defaults to 1s.
	Beat time.Duration
	// NowFunc replaces Redis TIME, and AfterFunc time.After
	// (deterministic tests only).
	NowFunc   func() time.Time
	AfterFunc func(time.Duration) <-chan time.Time
}

// NewPacer returns a pacer; a nil log discards.
func NewPacer(rdb redis.UniversalClient, log *slog.Logger) *Pacer {
	return &Pacer{rdb: rdb, log: logOrDiscard(log), Gap: time.Second, ChatBurst: DefaultChatBurst, Wait: 20 * time.Second, Beat: time.Second}
}

// DefaultChatBurst is a Pacer's ChatBurst unless set.
const DefaultChatBurst = 4

//go:embed pacer.lua
var pacerLua string

var lane = redis.NewScript(pacerLua)

// pacerKeys: the next free slot, the line of waiting writers, when each
// last asked, the end of a rate limit's hold, and the mark that someone
// may be in the line (read with the slot, so a free slot on an empty
// line is booked without reading the line); one hash tag, so the script
// runs on Redis Cluster.
func pacerKeys(inst int64) []string {
	p := "prq:ghwrite:{" + strconv.FormatInt(inst, 10) + "}"
	return []string{p, p + ":line", p + ":seen", p + ":hold", p + ":waiting"}
}

func (p *Pacer) now() time.Time {
	if p.NowFunc != nil {
		return p.NowFunc()
	}
	return time.Now()
}

// scriptNow is the script's clock: Redis TIME unless a test sets NowFunc,
// so every process's writes are spaced by one clock.
func (p *Pacer) scriptNow() string {
	if p.NowFunc == nil {
		return ""
	}
	return strconv.FormatInt(p.NowFunc().UnixMilli(), 10)
}

func (p *Pacer) after(d time.Duration) <-chan time.Time {
	if p.AfterFunc != nil {
		return p.AfterFunc(d)
	}
	return time.After(d)
}

// Do runs write when it is the installation's turn for a write of this
// class. A rate limit pushes every writer of the installation back and
// returns a *RetryAfterError, so the job is rescheduled, not failed.
func (p *Pacer) Do(ctx context.Context, inst int64, class WriteClass, write func() error) error {
	var b [12]byte
	_, _ = rand.Read(b[:])
	me := hex.EncodeToString(b[:])
	keys := pacerKeys(inst)
	beat := p.Beat
	if beat <= 0 {
		beat = time.Second
	}
	poll := min(50*time.Millisecond, max(p.Gap/4, time.Millisecond))
	var ahead time.Duration
	if class == ChatWrite {
		ahead = time.Duration(max(p.ChatBurst, 0)) * p.Gap
	}
	deadline := p.now().Add(p.Wait)
	for {
		wait, err := lane.Run(ctx, p.rdb, keys, "take", p.scriptNow(), me, int(class), p.Gap.Milliseconds(),
			(3 * beat).Milliseconds(), poll.Milliseconds(), ahead.Milliseconds()).Int64()
		if err != nil {
			p.leave(ctx, keys, me)
			return fmt.Errorf("workers: pace github writes: %w", err)
		}
		if wait == 0 {
			break
		}
		d := time.Duration(wait) * time.Millisecond
		if p.now().Add(d).After(deadline) {
			p.leave(ctx, keys, me)
			return &RetryAfterError{After: d, Err: errors.New("waiting for the installation's GitHub write turn")}
		}
		select {
		case <-ctx.Done():
			p.leave(ctx, keys, me)
			return ctx.Err()
		case <-p.after(min(d, beat)):
		}
	}
	err := write()
	var rl *ghapp.RateLimitedError
	if errors.As(err, &rl) {
		after := max(rl.RetryAfter, time.Second)
		if serr := lane.Run(ctx, p.rdb, keys, "hold", p.scriptNow(), after.Milliseconds()).Err(); serr != nil {
			p.log.WarnContext(ctx, "could not hold back the installation's other GitHub writers; they may hit the rate limit too", "installation", inst, "err", serr)
		}
		return &RetryAfterError{After: after, Err: err}
	}
	return err // a transient failure: asynq retries with backoff
}

// leave gives up a writer's place in the line; if that fails, the place
// lapses after 3 beats.
func (p *Pacer) leave(ctx context.Context, keys []string, me string) {
	if err := lane.Run(context.WithoutCancel(ctx), p.rdb, keys, "leave", p.scriptNow(), me).Err(); err != nil {
		p.log.WarnContext(ctx, "could not leave the GitHub write line; the place lapses in a few seconds", "err", err)
	}
}
