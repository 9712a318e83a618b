package admission

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/ratelimit"
)

// Reconcile repairs what crashes leave: released tasks that never reached
// a handler are released again; reservations nobody settled expire; and,
// when scan is set, held tasks without a ticket get one again.
func (s *Scheduler) Reconcile(ctx context.Context, rc RunConfig, scan bool) error {
	now, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return fmt.Errorf("admission: reconcile: %w", err)
	}
	if s.cfg.NowFunc != nil {
		now = s.cfg.NowFunc()
	}
	for model := range s.buckets {
		keys, _, _ := s.keys(model)
		due, err := s.rdb.ZRangeByScore(ctx, keys.Released, &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now.UnixMicro(), 10), Count: 1000}).Result()
		if err != nil {
			return fmt.Errorf("admission: reconcile: %w", err)
		}
		for _, id := range due {
			enc, err := s.rdb.HGet(ctx, keys.Tickets, id).Result()
			if errors.Is(err, redis.Nil) {
				if err := s.rdb.ZRem(ctx, keys.Released, id).Err(); err != nil {
					return fmt.Errorf("admission: reconcile: %w", err)
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("admission: reconcile: %w", err)
			}
			t, err := decodeTicket(enc)
			if err != nil { // written by no codec of ours: stop tracking it, say so once
				s.log.WarnContext(ctx, "released ticket unreadable; no longer re-released", "task", id, "err", err)
				if err := s.rdb.ZRem(ctx, keys.Released, id).Err(); err != nil {
					return fmt.Errorf("admission: reconcile: %w", err)
				}
				continue
			}
			s.rerelease(ctx, model, t.Queue, id, keys.Released, now)
		}
		if scan {
			if err := s.expire(ctx, model, now); err != nil {
				return err
			}
		}
	}
	if rc.TicketOf != nil && s.insp != nil {
		// the retry set holds what crashed workers left (small): every
		// pass; the scheduled set holds the whole backlog: now and then
		return s.adoptOrphans(ctx, rc, now, scan)
	}
	return nil
}

// expire, on a scan pass, ends a model's reservations charged more than
// ReservationTTL before now and counts the uncalled sums again from the
// reservations left (lua/expire.lua, which reads every open
// reservation's charge time: once a scan, a minute apart by default, so
// a reservation nobody settled ends at most that much after its TTL).
func (s *Scheduler) expire(ctx context.Context, model string, now time.Time) error {
	keys, b, err := s.keys(model)
	if err != nil {
		return err
	}
	old := now.Add(-s.cfg.ReservationTTL).UnixMicro()
	args := []any{s.now(), old}
	args = append(args, b.ScriptArgs(ratelimit.Values{})...)
	if err := expireScript.Run(ctx, s.rdb, keys.list(), args...).Err(); err != nil {
		return fmt.Errorf("admission: reconcile: expire reservations: %w", err)
	}
	return nil
}

func (s *Scheduler) rerelease(ctx context.Context, model, queue, id, releasedKey string, now time.Time) {
	if queue == NotifyQueue {
		// its caller never reported the start (it crashed or left): drop
		// the ticket; the reservation expires with the others
		s.forget(ctx, model, id)
		return
	}
	if s.insp == nil {
		return
	}
	info, err := s.insp.GetTaskInfo(queue, id)
	if err != nil {
		s.log.InfoContext(ctx, "released task is gone; dropping its ticket", "task", id, "err", err)
		s.forget(ctx, model, id)
		return
	}
	switch info.State {
	case asynq.TaskStateScheduled, asynq.TaskStateRetry:
		if err := s.insp.RunTask(queue, id); err != nil {
			if ctx.Err() == nil {
				s.log.WarnContext(ctx, "re-release failed", "task", id, "err", err)
			}
		} else {
			s.log.InfoContext(ctx, "re-released a task that never started (crash between admission and release?)", "task", id)
		}
	case asynq.TaskStatePending, asynq.TaskStateActive:
		// on its way: give it another timeout
	default:
		s.forget(ctx, model, id)
		return
	}
	if err := s.rdb.ZAdd(ctx, releasedKey, redis.Z{Score: float64(now.Add(s.cfg.ReleaseTimeout).UnixMicro()), Member: id}).Err(); err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "extending a release deadline failed", "task", id, "err", err)
	}
}

// adoptOrphans registers tickets for held tasks that have none: in the
// retry set, and when scheduled is set, in the scheduled set too.
func (s *Scheduler) adoptOrphans(ctx context.Context, rc RunConfig, now time.Time, scheduled bool) error {
	horizon := now.Add(s.cfg.Hold / 2)
	delayed := map[string]map[string]time.Time{} // model -> delayed tickets' due times, read once a scan
	var paused map[string]string                 // read once a scan, when an orphan is found
	start := time.Now()
	s.pruneOrphans(start)
	lists := []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){s.insp.ListRetryTasks}
	if scheduled {
		lists = append(lists, s.insp.ListScheduledTasks)
	}
	for _, q := range rc.Queues {
		for i, list := range lists {
			if i == 0 {
				// the retry set is empty nearly always: one ZCARD, not the
				// inspector's queue check and listing, every pass
				if n, err := s.rdb.ZCard(ctx, "asynq:{"+q+"}:retry").Result(); err == nil && n == 0 {
					continue
				}
			}
			for page := 1; ; page++ {
				tasks, err := list(q, asynq.Page(page), asynq.PageSize(500))
				if err != nil {
					if errors.Is(err, asynq.ErrQueueNotFound) {
						break
					}
					return fmt.Errorf("admission: list held tasks of %s: %w", q, err)
				}
				for _, ti := range tasks {
					if ti.NextProcessAt.Before(horizon) {
						continue // not held: an ordinary scheduled task
					}
					t, ok := rc.TicketOf(ti)
					if !ok {
						continue
					}
					if s.hasTicket(ctx, t, delayed, now) {
						continue
					}
					if rc.Moved != nil {
						// it may wait under a fallback model (asked only
						// here: one read per orphan, not per held task)
						if m := rc.Moved(ctx, t); m.Model != t.Model {
							if t = m; s.hasTicket(ctx, t, delayed, now) {
								continue
							}
						}
					}
					if paused == nil {
						paused = s.Paused(ctx)
					}
					if _, p := paused[t.Model]; p && !s.orphanedBefore(t.ID, start) {
						// a paused model's waiting jobs move to its fallbacks
						// (taken, then registered there): one seen between
						// the two is adopted only if a later pass finds it
						// orphaned still
						continue
					}
					if reg, err := s.Register(ctx, t); err == nil && reg {
						s.log.InfoContext(ctx, "adopted a held task without a ticket", "task", t.ID, "queue", q)
					}
				}
				if len(tasks) < 500 {
					break
				}
			}
		}
	}
	return nil
}

// orphanedBefore says whether task id was seen orphaned (held without a
// ticket, its model paused) before start, and notes it if not.
func (s *Scheduler) orphanedBefore(id string, start time.Time) bool {
	s.orphansMu.Lock()
	defer s.orphansMu.Unlock()
	if s.orphans == nil {
		s.orphans = map[string]time.Time{}
	}
	at, ok := s.orphans[id]
	if !ok {
		s.orphans[id] = time.Now()
		return false
	}
	return at.Before(start)
}

// pruneOrphans forgets orphans seen long ago (adopted, or gone since).
func (s *Scheduler) pruneOrphans(now time.Time) {
	s.orphansMu.Lock()
	defer s.orphansMu.Unlock()
	for id, at := range s.orphans {
		if now.Sub(at) > orphanMemory {
			delete(s.orphans, id)
		}
	}
}

// orphanMemory is how long an orphan seen once is remembered: longer
// than the reconciler's scans of the scheduled set are apart.
const orphanMemory = 30 * time.Minute

// hasTicket says whether t's job has a ticket under t's model: waiting,
// released, or delayed (a backoff, a spent quota's reset: admission
// registers it when it is due). The delayed set is read once a pass
// (delayed, by model), so the many tasks waiting for a quota cost no
// command each. A model admission does not know has none.
func (s *Scheduler) hasTicket(ctx context.Context, t Ticket, delayed map[string]map[string]time.Time, now time.Time) bool {
	keys, _, err := s.keys(t.Model)
	if err != nil {
		return true // nothing to register it under: leave it
	}
	if _, ok := delayed[t.Model]; !ok {
		delayed[t.Model] = s.delayedIDs(ctx, keys)
	}
	if due, ok := delayed[t.Model][t.ID]; ok && due.After(now) {
		return true
	}
	n, _ := s.rdb.HExists(ctx, keys.Tickets, t.ID).Result()
	return n
}

// delayedIDs returns a model's delayed tickets (registered when due) by
// id, with their due times. A failed read returns none: the scan adopts
// as before, and a ticket registered twice is not added twice.
func (s *Scheduler) delayedIDs(ctx context.Context, keys keySet) map[string]time.Time {
	members, err := s.rdb.ZRangeWithScores(ctx, keys.Delayed, 0, -1).Result()
	if err != nil {
		if ctx.Err() == nil { // not the process's own shutdown
			s.log.WarnContext(ctx, "admission: could not read the delayed tickets", "err", err)
		}
		return nil
	}
	ids := make(map[string]time.Time, len(members))
	for _, m := range members {
		if id, _, ok := strings.Cut(fmt.Sprint(m.Member), "\x00"); ok {
			ids[id] = time.UnixMicro(int64(m.Score))
		}
	}
	return ids
}
