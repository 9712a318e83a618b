package gateway

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A key's quota is spent by what its calls used and held by what its
// calls in flight reserved (input plus output cap, in tokens and in
// dollars at their prices) and have not settled.
// A request the quota cannot cover while others hold part of it waits
// for them to settle, in the order the key's requests came, until its
// deadline: it is then reserved with its output capped to what is left,
// refused (403) only once what is left with nothing held cannot cover
// it, and past its deadline refused with 429 and a Retry-After of when
// the oldest reservation should settle.
//
// The quota (ratelimit.Quota) knows what is used and reserved, not what
// is held: the ledger here keeps, per key, the tokens and nano-dollars
// each of its reservations holds and the requests waiting, in Redis so
// that every gateway process of the key sees them. Only the oldest waiter of a key
// reserves; before it does, the ledger holds the most it may reserve for
// it, so that a waiter never counts on less being held than is. A
// reservation whose process died leaves the ledger after the quota's
// reservation TTL (its tokens stay spent in the quota, never an
// overshoot); a waiter whose process died leaves at its deadline.

//go:embed held.lua
var turnSource string

var turnScript = redis.NewScript(turnSource)

// ledger is the keys' held reservations and waiters.
type ledger struct {
	rdb redis.UniversalClient
	ttl time.Duration // the quota's reservation TTL

	mu    sync.Mutex
	wakes map[string]chan struct{} // key id → closed when its quota may have room
	// settle is how long reservations take to settle (an average, µs),
	// for Retry-After
	settle time.Duration
}

func newLedger(rdb redis.UniversalClient, ttl time.Duration) *ledger {
	return &ledger{rdb: rdb, ttl: ttl, wakes: map[string]chan struct{}{}, settle: time.Second}
}

// ledgerKeys are a key's ledger: amounts and dollars hold its
// reservations' tokens and nano-dollars.
type ledgerKeys struct{ amounts, starts, waiters, deadlines, dollars string }

func keysOf(keyID string) ledgerKeys {
	tag := "{prq:gw:held:" + keyID + "}"
	return ledgerKeys{amounts: tag + ":amounts", starts: tag + ":starts", waiters: tag + ":waiters", deadlines: tag + ":deadlines", dollars: tag + ":dollars"}
}

func (k ledgerKeys) list() []string {
	return []string{k.amounts, k.starts, k.waiters, k.deadlines, k.dollars}
}

// turnState is a waiter's view of its key's quota.
type turnState struct {
	turn   bool      // the oldest waiter: it may reserve (its amounts are held for it)
	held   amounts   // held by the key's other reservations
	oldest time.Time // the oldest other reservation's start (zero: none)
	now    time.Time // Redis's clock
}

// turn joins id to the key's waiters (once) and reports its state; a
// is held for it when it is its turn.
func (l *ledger) turn(ctx context.Context, keyID, id string, deadline time.Time, a amounts) (turnState, error) {
	res, err := turnScript.Run(ctx, l.rdb, keysOf(keyID).list(), id, deadline.UnixMicro(), l.ttl.Microseconds(), a.tokens, a.nano).Int64Slice()
	if err == nil && len(res) != 5 {
		err = fmt.Errorf("%d values, want 5", len(res))
	}
	if err != nil {
		return turnState{}, fmt.Errorf("gateway: quota turn: %w", err)
	}
	st := turnState{turn: res[0] == 1, held: amounts{tokens: res[1], nano: res[4]}, now: time.UnixMicro(res[3])}
	if res[2] > 0 {
		st.oldest = time.UnixMicro(res[2])
	}
	return st, nil
}

// granted records what id's reservation holds and ends its wait.
func (l *ledger) granted(ctx context.Context, keyID, id string, a amounts) error {
	k := keysOf(keyID)
	_, err := l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, k.amounts, id, a.tokens)
		if a.nano > 0 { // a key with a dollar quota
			p.HSet(ctx, k.dollars, id, a.nano)
		}
		p.ZRem(ctx, k.waiters, id)
		p.HDel(ctx, k.deadlines, id)
		return nil
	})
	l.wake(keyID) // the next waiter's turn
	if err != nil {
		return fmt.Errorf("gateway: quota granted: %w", err)
	}
	return nil
}

// unhold drops what is held for id (its reservation was refused, or it
// settled); leaving also ends its wait.
func (l *ledger) unhold(ctx context.Context, keyID, id string, leaving bool) error {
	k := keysOf(keyID)
	_, err := l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, k.amounts, id)
		p.HDel(ctx, k.dollars, id)
		p.ZRem(ctx, k.starts, id)
		if leaving {
			p.ZRem(ctx, k.waiters, id)
			p.HDel(ctx, k.deadlines, id)
		}
		return nil
	})
	if leaving || err == nil {
		l.wake(keyID)
	}
	if err != nil {
		return fmt.Errorf("gateway: quota unhold: %w", err)
	}
	return nil
}

// held is what the key's reservations hold now (stale ones included: a
// bound from above).
func (l *ledger) held(ctx context.Context, keyID string) (amounts, error) {
	k := keysOf(keyID)
	var tokens, dollars *redis.StringSliceCmd
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		tokens = p.HVals(ctx, k.amounts)
		dollars = p.HVals(ctx, k.dollars)
		return nil
	})
	if err != nil {
		return amounts{}, fmt.Errorf("gateway: quota held: %w", err)
	}
	sum := func(vals []string) int64 {
		var n int64
		for _, v := range vals {
			x, _ := strconv.ParseInt(v, 10, 64)
			n += x
		}
		return n
	}
	return amounts{tokens: sum(tokens.Val()), nano: sum(dollars.Val())}, nil
}

// wait returns a channel closed when the key's quota may have room (a
// reservation of this process settled, a waiter left).
func (l *ledger) wait(keyID string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.wakes[keyID]
	if !ok {
		c = make(chan struct{})
		l.wakes[keyID] = c
	}
	return c
}

func (l *ledger) wake(keyID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.wakes[keyID]; ok {
		close(c)
		delete(l.wakes, keyID)
	}
}

// settled records how long a reservation took to settle.
func (l *ledger) settled(d time.Duration) {
	l.mu.Lock()
	l.settle += (d - l.settle) / 8
	l.mu.Unlock()
}

// retryAfter is when the oldest reservation should settle, at least a
// second from now.
func (l *ledger) retryAfter(st turnState) time.Duration {
	l.mu.Lock()
	d := l.settle
	l.mu.Unlock()
	if !st.oldest.IsZero() {
		d = st.oldest.Add(d).Sub(st.now)
	}
	return max(d, time.Second)
}
