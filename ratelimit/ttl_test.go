package ratelimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// ttlSteps runs B.ttlrefresh over a stepped clock: a save after each
// step (ms), the key's expiry as PEXPIRE sets it when the save refreshes
// (an expired state is gone: no field x). Per save: how far the key's
// expiry is from the save (ms; what an untouched state has left), and
// whether the save refreshed (1) or not (0).
var ttlSteps = redis.NewScript(ratelimit.LuaLibrary + `
local ttl, now, exp, field, out = tonumber(ARGV[1]), 1800000000000, nil, nil, {}
for i = 2, #ARGV do
  now = now + tonumber(ARGV[i])
  if exp ~= nil and now >= exp then exp, field = nil, nil end
  local r = B.ttlrefresh({now = now * 1000, expiry = field}, ttl)
  if r then exp, field = now + ttl + B.TTLSLACK, r end
  out[#out + 1] = {exp - now, r and 1 or 0}
end
return out`)

// TestStateTTLNeverShort: a state whose TTL is refreshed at most once a
// TTLSLACK still expires only once it went untouched for its whole
// TTL (an expired state reads as full or empty: exact only then), on
// any clock steps, and a save inside the interval does not refresh.
func TestStateTTLNeverShort(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	const ttl = 62000
	steps := []any{ttl, 0, 1, 1, 998, 1, 999, 1000, 1001, 250, 250, 250, 250, 250, 61999, 62000, 62001, 1, 0, 63000, 500, 500, 500}
	for range 200 {
		steps = append(steps, 7) // a busy state: saves every 7 ms
	}
	res, err := ttlSteps.Run(ctx, rdb, nil, steps...).Slice()
	if err != nil {
		t.Fatal(err)
	}
	refreshed, busy := 0, 0
	for i, r := range res {
		v := r.([]any)
		left, did := v[0].(int64), v[1].(int64)
		if left < ttl {
			t.Fatalf("save %d (step %v ms): the state expires in %d ms, under its TTL %d ms", i, steps[i+1], left, ttl)
		}
		if left > ttl+1000 {
			t.Fatalf("save %d: the state expires in %d ms, over TTL + slack", i, left)
		}
		refreshed += int(did)
		if i >= len(steps)-1-200 {
			busy += int(did)
		}
	}
	// 200 saves over 1.4 s: at most two refreshes
	if busy > 2 {
		t.Fatalf("a busy state refreshed its TTL %d times in 1.4 s", busy)
	}
	if refreshed == len(res) {
		t.Fatal("every save refreshed the TTL")
	}
}

// TestStateTTLOnRedisClock: saves on Redis's clock keep the state for at
// least its TTL after the last save (read in one script: Redis's time,
// the key's PTTL, the last save's time), and a save within the slack of
// the last refresh leaves the TTL.
func TestStateTTLOnRedisClock(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	l := ratelimit.Limits{RequestsPerPeriod: 600, TokensPerPeriod: 60000, Period: time.Minute}
	b, err := ratelimit.NewBucket(rdb, t.Name(), "sk-ttl", l)
	if err != nil {
		t.Fatal(err)
	}
	key := b.StateKey()
	// the TTL a save needs: 2·P + 60 s, P the longest period
	const need = 2*60000 + 60000
	check := redis.NewScript(`local t = redis.call('TIME')
return {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), redis.call('PTTL', KEYS[1]),
  math.floor(tonumber(redis.call('HGET', KEYS[1], 't')) / 1000), tonumber(redis.call('HGET', KEYS[1], 'x') or '-1')}`)
	state := func() (now, pttl, last, x int64) {
		t.Helper()
		v, err := check.Run(ctx, rdb, []string{key}).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return v[0], v[1], v[2], v[3]
	}
	var x0 int64
	for i := range 20 {
		if _, err := b.Reserve(ctx, fmt.Sprint("j", i), ratelimit.Cost{Requests: 1, Tokens: 10}); err != nil {
			t.Fatal(err)
		}
		now, pttl, last, x := state()
		if now+pttl < last+need {
			t.Fatalf("save %d: the state expires %d ms after its last save, under %d", i, now+pttl-last, need)
		}
		if i > 0 && x0-last >= need+1 && x0-last <= need+1000 && x != x0 {
			t.Fatalf("save %d, %d ms before the recorded expiry: refreshed (x %d -> %d)", i, x0-last, x0, x)
		}
		x0 = x
	}
}
