package admission

import (
	"context"
	"fmt"
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

// PauseKey stops admissions charged to one of a model's API keys for d
// (the key failed authentication, or its account has no quota): the
// model's other keys keep serving. A model with one key is paused
// whole (Pause).
func (s *Scheduler) PauseKey(ctx context.Context, model string, key int, reason string, d time.Duration) error {
	keys, b, err := s.keys(model)
	if err != nil {
		return err
	}
	if b.Keys() == 1 {
		return s.Pause(ctx, model, reason, d)
	}
	if key < 0 || key >= b.Keys() {
		return fmt.Errorf("admission: model %s has no key %d", model, key)
	}
	return s.rdb.Set(ctx, keys.KeyPaused[key], reason, d).Err()
}

// ResumeKey lets a paused key of a model admit again.
func (s *Scheduler) ResumeKey(ctx context.Context, model string, key int) error {
	keys, _, err := s.keys(model)
	if err != nil {
		return err
	}
	if key < 0 || key >= len(keys.KeyPaused) {
		return fmt.Errorf("admission: model %s has no key %d", model, key)
	}
	return s.rdb.Del(ctx, keys.KeyPaused[key]).Err()
}

// Resume lets a paused model admit again.
func (s *Scheduler) Resume(ctx context.Context, model string) error {
	keys, _, err := s.keys(model)
	if err != nil {
		return err
	}
	return s.rdb.Del(ctx, keys.Paused).Err()
}

// Paused returns the paused models and why: paused whole, or every one
// of their keys paused. A model some of whose keys serve is not paused
// (PausedKeys names its paused keys).
func (s *Scheduler) Paused(ctx context.Context) map[string]string {
	out := map[string]string{}
	for m, b := range s.buckets {
		keys, _, _ := s.keys(m)
		if r, err := s.rdb.Get(ctx, keys.Paused).Result(); err == nil {
			out[m] = r
			continue
		}
		if pk := s.PausedKeys(ctx, m); b.Keys() > 1 && len(pk) == b.Keys() {
			out[m] = "every key is paused: " + pk[0]
		}
	}
	return out
}

// PausedKeys returns a model's paused keys (by index) and why; empty for
// a model with one key (Paused covers it).
func (s *Scheduler) PausedKeys(ctx context.Context, model string) map[int]string {
	out := map[int]string{}
	keys, b, err := s.keys(model)
	if err != nil || b.Keys() == 1 {
		return out
	}
	for i, k := range keys.KeyPaused {
		if r, err := s.rdb.Get(ctx, k).Result(); err == nil {
			out[i] = r
		}
	}
	return out
}
