package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/ghapp"
)

// Pacer serialises an installation's content-creating GitHub calls
// across every process: one writer at a time, at least Gap apart, and
// after a rate limit nobody writes until GitHub's retry time.
type Pacer struct {
	rdb redis.UniversalClient
	log *slog.Logger
	// Gap between writes of one installation. Defaults to 1s (GitHub's advice).
	Gap time.Duration
	// Wait is the longest a job waits for its turn before rescheduling.
	// Defaults to 20s.
	Wait time.Duration
}

// NewPacer returns a pacer; a nil log discards.
func NewPacer(rdb redis.UniversalClient, log *slog.Logger) *Pacer {
	return &Pacer{rdb: rdb, log: logOrDiscard(log), Gap: time.Second, Wait: 20 * time.Second}
}

var acquire = redis.NewScript(`
-- KEYS[1] next-allowed time (ms)  ARGV[1] now ms  ARGV[2] gap ms
-- -> 0 acquired (next slot booked), or ms to wait
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local next = tonumber(redis.call('GET', KEYS[1]) or '0')
if next > now then return next - now end
redis.call('SET', KEYS[1], now + tonumber(ARGV[2]), 'PX', tonumber(ARGV[2]) + 3600000)
return 0
`)

func pacerKey(inst int64) string { return "prq:ghwrite:" + strconv.FormatInt(inst, 10) }

// Do runs write when it is the installation's turn. A rate limit pushes
// every writer of the installation back and returns a *RetryAfterError,
// so the job is rescheduled, not failed.
func (p *Pacer) Do(ctx context.Context, inst int64, write func() error) error {
	deadline := time.Now().Add(p.Wait)
	for {
		wait, err := acquire.Run(ctx, p.rdb, []string{pacerKey(inst)}, 0, p.Gap.Milliseconds()).Int64()
		if err != nil {
			return fmt.Errorf("workers: pace github writes: %w", err)
		}
		if wait == 0 {
			break
		}
		d := time.Duration(wait) * time.Millisecond
		if time.Now().Add(d).After(deadline) {
			return &RetryAfterError{After: d, Err: errors.New("waiting for the installation's GitHub write turn")}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
	}
	err := write()
	var rl *ghapp.RateLimitedError
	if errors.As(err, &rl) {
		after := max(rl.RetryAfter, time.Second)
		if serr := p.rdb.Set(ctx, pacerKey(inst), strconv.FormatInt(time.Now().Add(after).UnixMilli(), 10), after+time.Hour).Err(); serr != nil {
			p.log.WarnContext(ctx, "could not hold back the installation's other GitHub writers; they may hit the rate limit too", "installation", inst, "err", serr)
		}
		return &RetryAfterError{After: after, Err: err}
	}
	return err // a transient failure: asynq retries with backoff
}
