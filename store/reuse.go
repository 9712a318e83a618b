package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReuseTTL is how long a file's result stays reusable by another job
// whose prompt is the same (a head that replaced its own, a pull request
// reopened at the same head, a full review of unchanged context does
// not: it asks for new work).
const ReuseTTL = 6 * time.Hour

// reuseClaimTTL bounds how long a job's claim on a prompt stands until
// its result replaces it: longer than a call takes (a flex call may take
// 15 minutes); a crashed job's claim holds twins back no longer than
// their own bound on waiting.
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
	if strings.HasPrefix(string(b), claimPrefix) {
		return Result{}, false, nil // claimed: being answered
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		// unreadable: as if absent (the job asks the model); it expires
		return Result{}, false, nil
	}
	return r, true, nil
}

// SaveReusable records a prompt's result for ReuseTTL, in place of the
// claim on it (one key holds either).
func (s *Store) SaveReusable(ctx context.Context, key string, r Result) error {
	r.Index, r.Run, r.Part, r.Parts, r.Tokens = 0, 0, 0, 0, 0
	b, _ := json.Marshal(r)
	if err := s.rdb.Set(ctx, reuseKey(key), b, ReuseTTL).Err(); err != nil {
		return fmt.Errorf("store: save reusable result: %w", err)
	}
	return nil
}

// claimPrefix starts a claim's value in a prompt's key; a result is a
// JSON object.
const claimPrefix = "claim:"

// ReusableOrClaim returns the result recorded for a prompt key, if any;
// else it claims the prompt for the job id, so another job with the
// same prompt waits for its result rather than paying for it again:
// mine reports whether id holds the claim (it did already, or took it
// now). The result and the claim share the key, so this is one command
// (SET NX GET; two before Redis 7.0): no twin sees neither.
func (s *Store) ReusableOrClaim(ctx context.Context, key, id string) (r Result, found, mine bool, err error) {
	v, err := s.setNXGet(ctx, reuseKey(key), claimPrefix+id, reuseClaimTTL)
	switch {
	case errors.Is(err, redis.Nil):
		return Result{}, false, true, nil // free: claimed now
	case err != nil:
		return Result{}, false, false, fmt.Errorf("store: reusable or claim: %w", err)
	case strings.HasPrefix(v, claimPrefix):
		return Result{}, false, v == claimPrefix+id, nil
	}
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		// unreadable: as if absent (the job asks the model, and its
		// result replaces it)
		return Result{}, false, true, nil
	}
	return r, true, false, nil
}
