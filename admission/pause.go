package admission

import (
	"context"
	"time"
)

// Pause stops every process's admissions of a model for d (a bad key or
// exhausted billing: no retry storm); the reason shows on the dashboard.
// Admissions resume by themselves after d, to find out whether the
// account was fixed.
func (s *Scheduler) Pause(ctx context.Context, model, reason string, d time.Duration) error {
	keys, _, err := s.keys(model)
	if err != nil {
		return err
	}
	return s.rdb.Set(ctx, keys.Paused, reason, d).Err()
}

// Resume lets a paused model admit again.
func (s *Scheduler) Resume(ctx context.Context, model string) error {
	keys, _, err := s.keys(model)
	if err != nil {
		return err
	}
	return s.rdb.Del(ctx, keys.Paused).Err()
}

// Paused returns the paused models and why.
func (s *Scheduler) Paused(ctx context.Context) map[string]string {
	out := map[string]string{}
	for m := range s.buckets {
		keys, _, _ := s.keys(m)
		if r, err := s.rdb.Get(ctx, keys.Paused).Result(); err == nil {
			out[m] = r
		}
	}
	return out
}
