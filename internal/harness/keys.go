package harness

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// PermanentKey tells the keys prq keeps without a TTL by design, as
// docs/architecture.md ("What is in Redis") lists them: per installation or account
// (plans, Marketplace tiers), the shared counters, the index of runs in
// progress (its members leave when runs end or expire), admission's
// and the limiters' state per model, and the worker-process registry.
func PermanentKey(k string) bool {
	for _, p := range []string{"prq:inst:", "prq:insts", "prq:account:", "prq:llm:calls", "prq:llm:cost", "prq:github:requests", "prq:github:decoration_errors", "prq:jobs:gave_up", "prq:jobs:fallbacks", "prq:lifecycle",
		"{prq:acceptance}:totals", "prq:votes:due", "prq:prs:active", "{prq:rl:", "prq:procs"} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// KeysWithoutTTL scans Redis for prq's keys that never expire and are not
// PermanentKey (asynq's own keys aside: its task retention is per task).
func KeysWithoutTTL(ctx context.Context, rdb redis.UniversalClient) (missing, permanent []string, err error) {
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if strings.HasPrefix(k, "asynq:") {
			continue
		}
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			return nil, nil, err
		}
		switch {
		case ttl != -1: // it expires (or expired since the scan saw it: -2)
		case PermanentKey(k):
			permanent = append(permanent, k)
		default:
			missing = append(missing, k)
		}
	}
	return missing, permanent, iter.Err()
}
