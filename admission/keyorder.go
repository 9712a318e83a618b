package admission

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// keyOrderTTL is how long a key order stays claimed after the last
// process that lists it stopped renewing it.
const keyOrderTTL = 2 * time.Minute

// ErrKeyOrder is ClaimKeyOrder's error when another running process
// lists a model's API keys differently.
var ErrKeyOrder = errors.New("admission: processes list a model's API keys differently")

// keyOrderKey records, for a model with several API keys, the order (by
// short hash) the running processes list them in. It is not under the
// model's hash tag: that tag is derived from the first key, which is
// what a different order changes.
func keyOrderKey(model string) string { return "prq:keyorder:" + model }

func (s *Scheduler) keyOrder(model string) string {
	b := s.buckets[model]
	labels := make([]string, b.Keys())
	for i := range labels {
		labels[i] = b.KeyLabel(i)
	}
	return strings.Join(labels, ",")
}

// ClaimKeyOrder records, for each model with several API keys, the order
// this process lists them in, or refuses (ErrKeyOrder) when another
// running process lists them differently. Admission records a job's key
// by its index, and a model's Redis keys are named after its first key:
// processes that disagree would call with a key other than the one
// charged, or keep two sets of buckets for one account, and the provider
// would answer 429s. The claim lasts keyOrderTTL after its last renewal
// (every reconcile pass of a running admission loop).
func (s *Scheduler) ClaimKeyOrder(ctx context.Context) error {
	var errs []error
	for model, b := range s.buckets {
		if b.Keys() < 2 {
			continue
		}
		ours := s.keyOrder(model)
		err := s.rdb.SetArgs(ctx, keyOrderKey(model), ours, redis.SetArgs{Mode: "NX", TTL: keyOrderTTL}).Err()
		if err != nil && !errors.Is(err, redis.Nil) {
			errs = append(errs, fmt.Errorf("admission: model %s: record the key order: %w", model, err))
			continue
		}
		theirs, err := s.rdb.Get(ctx, keyOrderKey(model)).Result()
		switch {
		case errors.Is(err, redis.Nil): // expired in between: ours next time
		case err != nil:
			errs = append(errs, fmt.Errorf("admission: model %s: read the key order: %w", model, err))
		case theirs != ours:
			errs = append(errs, fmt.Errorf("%w: model %s: this process lists its keys as [%s], a running process as [%s] (short hashes); "+
				"list key_env in the same order in every process (after every process with the old order has stopped, its claim expires within %s, or delete %s)",
				ErrKeyOrder, model, ours, theirs, keyOrderTTL, keyOrderKey(model)))
		default:
			if err := s.rdb.Expire(ctx, keyOrderKey(model), keyOrderTTL).Err(); err != nil {
				errs = append(errs, fmt.Errorf("admission: model %s: renew the key order: %w", model, err))
			}
		}
	}
	return errors.Join(errs...)
}
