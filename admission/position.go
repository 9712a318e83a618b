package admission

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/prq-dev/prq/jobs"
)

// Position is where a group of tickets (a pull request head's jobs of
// one model) stands in admission's order: an estimate for people to
// read, never an input to admission.
type Position struct {
	// Found counts the tickets of the group that wait in line (not
	// admitted, not delayed, not unknown to this model).
	Found int
	// Ahead estimates how many tickets admission takes before the
	// group's first: the rest of its tenant's flow ahead of it, each
	// other tenant of its class up to as many turns (fair queuing),
	// waiting chat, and the other tiers — all of a higher tier when
	// tiers are strict, by their weights when weighted.
	Ahead int64
	// Class is the first ticket's class (chat or a tier).
	Class string
	// Rate is the model's measured admissions per second (sampled every
	// 10 s or more, across processes, smoothed); 0 before the second
	// sample.
	Rate float64
	// Now is when it was read, by admission's clock.
	Now time.Time
}

// ETA estimates how long until the group's first ticket is admitted:
// Ahead at Rate. It is 0 with no rate measured yet (or none ahead).
func (p Position) ETA() time.Duration {
	if p.Rate <= 0 || p.Ahead <= 0 {
		return 0
	}
	return time.Duration(float64(p.Ahead) / p.Rate * float64(time.Second))
}

// Position tells where the first of ids that waits for model stands.
// Each call also samples the model's admission rate. Ids the model does
// not hold as waiting (admitted, delayed, another model's, unknown) are
// not counted in Found.
func (s *Scheduler) Position(ctx context.Context, model string, ids []string) (Position, error) {
	keys, _, err := s.keys(model)
	if err != nil {
		return Position{}, err
	}
	mode := "weighted"
	if s.cfg.Strict {
		mode = "strict"
	}
	args := make([]any, 0, 6+len(ids))
	args = append(args, s.now(), mode, s.cfg.Weights[jobs.TierPaid], s.cfg.Weights[jobs.TierTrial], s.cfg.Weights[jobs.TierFree])
	for _, id := range ids {
		args = append(args, id)
	}
	res, err := positionScript.Run(ctx, s.rdb, keys.list(), args...).Slice()
	if err != nil {
		return Position{}, fmt.Errorf("admission: position in %s: %w", model, err)
	}
	if len(res) != 5 {
		return Position{}, fmt.Errorf("admission: position in %s: unexpected reply of %d values", model, len(res))
	}
	us, _ := strconv.ParseInt(fmt.Sprint(res[0]), 10, 64)
	found, _ := res[1].(int64)
	ahead, _ := res[2].(int64)
	class, _ := res[3].(string)
	rate, _ := strconv.ParseFloat(fmt.Sprint(res[4]), 64)
	return Position{Found: int(found), Ahead: ahead, Class: class, Rate: rate, Now: time.UnixMicro(us)}, nil
}
