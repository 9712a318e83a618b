package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReuseTTL is how long a file's result stays reusable by another job
// whose prompt is the same (a head that replaced its own, a pull request
// reopened at the same head, a full review of unchanged context does
// not: it asks for new work).
const ReuseTTL = 6 * time.Hour

// reuseClaimTTL bounds how long a job's claim on a prompt stands:
// longer than a call takes (a flex call may take 15 minutes); a crashed
// job's claim holds twins back no longer than their own bound on waiting.
const reuseClaimTTL = 20 * time.Minute

func reuseKey(key string) string { return "prq:reuse:" + key }

// Reusable returns the result recorded for a prompt key, if any.
func (s *Store) Reusable(ctx context.Context, key string) (Result, bool, error) {
	b, err := s.rdb.Get(ctx, reuseKey(key)).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return Result{}, false, nil
	case err != nil:
		return Result{}, false, fmt.Errorf("store: reusable result: %w", err)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		// unreadable: as if absent (the job asks the model); it expires
		return Result{}, false, nil
	}
	return r, true, nil
}

// SaveReusable records a prompt's result for ReuseTTL. The claim on it
// is left to expire: a twin reads the result before it claims, so the
// claim no longer counts (and a twin between the two reads waits for the
// result rather than paying).
func (s *Store) SaveReusable(ctx context.Context, key string, r Result) error {
	r.Index, r.Run, r.Part, r.Parts, r.Tokens = 0, 0, 0, 0, 0
	b, _ := json.Marshal(r)
	if err := s.rdb.Set(ctx, reuseKey(key), b, ReuseTTL).Err(); err != nil {
		return fmt.Errorf("store: save reusable result: %w", err)
	}
	return nil
}

// ClaimReuse claims a prompt for the job id, so another job with the
// same prompt waits for its result rather than paying for it again. It
// reports whether id holds the claim (it did already, or took it now).
func (s *Store) ClaimReuse(ctx context.Context, key, id string) (bool, error) {
	ok, err := s.rdb.SetNX(ctx, reuseKey(key)+":claim", id, reuseClaimTTL).Result()
	if err != nil {
		return false, fmt.Errorf("store: claim reuse: %w", err)
	}
	if ok {
		return true, nil
	}
	holder, err := s.rdb.Get(ctx, reuseKey(key)+":claim").Result()
	if errors.Is(err, redis.Nil) {
		return s.ClaimReuse(ctx, key, id) // released meanwhile
	}
	if err != nil {
		return false, fmt.Errorf("store: claim reuse: %w", err)
	}
	return holder == id, nil
}
