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
	return s.rdb.Set(ctx, keys[14], reason, d).Err()
}

// Resume lets a paused model admit again.
func (s *Scheduler) Resume(ctx context.Context, model string) error {
	keys, _, err := s.keys(model)
	if err != nil {
		return err
	}
	return s.rdb.Del(ctx, keys[14]).Err()
}

// Paused returns the paused models and why.
func (s *Scheduler) Paused(ctx context.Context) map[string]string {
	out := map[string]string{}
	for m := range s.buckets {
		keys, _, _ := s.keys(m)
		if r, err := s.rdb.Get(ctx, keys[14]).Result(); err == nil {
			out[m] = r
		}
	}
	return out
}

// RunConfig tunes the admission loop.
type RunConfig struct {
	// Capacity returns how many more jobs this process can start now
	// (idle slots minus released work not yet started). Required.
	Capacity func() int
	// Poll is the sleep when this process has no free slot. Defaults to 20ms.
	Poll time.Duration
	// MaxSleep bounds a sleep while tickets wait for room or none wait; a
	// new ticket wakes the loop at once (pub/sub). Defaults to 250ms.
	MaxSleep time.Duration
	// ReconcileEvery is the reconciler's period. Defaults to 5s.
	ReconcileEvery time.Duration
	// TicketOf rebuilds a ticket from a held task without one (a crash
	// between hold and register, or in a handler). Nil disables that repair.
	TicketOf func(*asynq.TaskInfo) (Ticket, bool)
	// Queues to reconcile.
	Queues []string
}

// Run admits and releases until ctx ends: one loop per model, and the
// reconciler. Many processes may run it at once; each decision is atomic.
func (s *Scheduler) Run(ctx context.Context, rc RunConfig) {
	if rc.Poll == 0 {
		rc.Poll = 20 * time.Millisecond
	}
	if rc.ReconcileEvery == 0 {
		rc.ReconcileEvery = 5 * time.Second
	}
	if rc.MaxSleep == 0 {
		rc.MaxSleep = 250 * time.Millisecond
	}
	wake := map[string]chan struct{}{}
	byChannel := map[string]string{}
	var channels []string
	for model := range s.buckets {
		wake[model] = make(chan struct{}, 1)
		keys, _, _ := s.keys(model)
		byChannel[wakeChannel(keys)] = model
		channels = append(channels, wakeChannel(keys))
	}
	sub := s.rdb.Subscribe(ctx, channels...)
	defer sub.Close()
	go func() {
		for msg := range sub.Channel() {
			if c, ok := wake[byChannel[msg.Channel]]; ok {
				select {
				case c <- struct{}{}:
				default:
				}
			}
		}
	}()
	done := make(chan struct{})
	n := 0
	for model := range s.buckets {
		n++
		go func(model string) {
			defer func() { done <- struct{}{} }()
			s.loop(ctx, model, rc, wake[model])
		}(model)
	}
	n++
	go func() {
		defer func() { done <- struct{}{} }()
		t := time.NewTicker(rc.ReconcileEvery)
		defer t.Stop()
		for pass := 0; ; pass++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := s.Reconcile(ctx, rc, pass%12 == 0); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "reconcile failed", "err", err)
			}
		}
	}()
	for i := 0; i < n; i++ {
		<-done
	}
}

func (s *Scheduler) loop(ctx context.Context, model string, rc RunConfig, wake <-chan struct{}) {
	backoff := rc.Poll
	for ctx.Err() == nil {
		budget := rc.Capacity()
		if budget <= 0 {
			sleep(ctx, rc.Poll, nil)
			continue
		}
		adm, wait, err := s.Admit(ctx, model, budget)
		if err != nil {
			if ctx.Err() == nil {
				s.log.WarnContext(ctx, "admission failed", "model", model, "err", err)
			}
			sleep(ctx, backoff, nil)
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		backoff = rc.Poll
		s.Release(ctx, adm)
		if len(adm) > 0 {
			continue
		}
		// nothing fits until wait (exact), or nothing waits: sleep until
		// then, or until a new ticket arrives
		if wait <= 0 || wait > rc.MaxSleep {
			wait = rc.MaxSleep
		}
		sleep(ctx, wait, wake)
	}
}

func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-wake:
	}
}

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
		due, err := s.rdb.ZRangeByScore(ctx, keys[9], &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now.UnixMicro(), 10), Count: 1000}).Result()
		if err != nil {
			return fmt.Errorf("admission: reconcile: %w", err)
		}
		for _, id := range due {
			enc, err := s.rdb.HGet(ctx, keys[1], id).Result()
			if errors.Is(err, redis.Nil) {
				s.rdb.ZRem(ctx, keys[9], id)
				continue
			}
			if err != nil {
				return fmt.Errorf("admission: reconcile: %w", err)
			}
			queue := strings.Split(enc, "|")[5]
			s.rerelease(ctx, model, queue, id, keys[9], now)
		}
		old := strconv.FormatInt(now.Add(-s.cfg.ReservationTTL).UnixMicro(), 10)
		stale, err := s.rdb.ZRangeByScore(ctx, keys[12], &redis.ZRangeBy{Min: "-inf", Max: old, Count: 1000}).Result()
		if err == nil && len(stale) > 0 {
			s.rdb.HDel(ctx, keys[11], stale...)
			s.rdb.ZRem(ctx, keys[12], toAny(stale)...)
		}
	}
	if rc.TicketOf != nil && s.insp != nil {
		// the retry set holds what crashed workers left (small): every
		// pass; the scheduled set holds the whole backlog: now and then
		return s.adoptOrphans(ctx, rc, now, scan)
	}
	return nil
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func (s *Scheduler) rerelease(ctx context.Context, model, queue, id, releasedKey string, now time.Time) {
	if s.insp == nil {
		return
	}
	info, err := s.insp.GetTaskInfo(queue, id)
	if err != nil {
		s.log.InfoContext(ctx, "released task is gone; dropping its ticket", "task", id, "err", err)
		s.Started(ctx, model, id)
		return
	}
	switch info.State {
	case asynq.TaskStateScheduled, asynq.TaskStateRetry:
		if err := s.insp.RunTask(queue, id); err != nil {
			s.log.WarnContext(ctx, "re-release failed", "task", id, "err", err)
		} else {
			s.log.InfoContext(ctx, "re-released a task that never started (crash between admission and release?)", "task", id)
		}
	case asynq.TaskStatePending, asynq.TaskStateActive:
		// on its way: give it another timeout
	default:
		s.Started(ctx, model, id)
		return
	}
	s.rdb.ZAdd(ctx, releasedKey, redis.Z{Score: float64(now.Add(s.cfg.ReleaseTimeout).UnixMicro()), Member: id})
}

// adoptOrphans registers tickets for held tasks that have none: in the
// retry set, and when scheduled is set, in the scheduled set too.
func (s *Scheduler) adoptOrphans(ctx context.Context, rc RunConfig, now time.Time, scheduled bool) error {
	horizon := now.Add(s.cfg.Hold / 2)
	lists := []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){s.insp.ListRetryTasks}
	if scheduled {
		lists = append(lists, s.insp.ListScheduledTasks)
	}
	for _, q := range rc.Queues {
		for _, list := range lists {
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
					keys, _, err := s.keys(t.Model)
					if err != nil {
						continue
					}
					if n, _ := s.rdb.HExists(ctx, keys[1], t.ID).Result(); n {
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

// Stats is a model's admission state.
type Stats struct {
	Backlog  map[string]int64 // waiting tickets per class
	Released int64            // admitted, not yet started
	// Per class: incoming and admitted tokens and jobs; tokens admitted
	// ahead of FIFO order, and tokens by which the class was passed.
	InTokens, InJobs, AdmTokens, AdmJobs, AheadTokens, BehindTokens map[string]int64
	Now                                                             time.Time
	// Waits are the recent admissions' waits per class, newest first.
	Waits map[string][]time.Duration
	// TenantBacklog counts waiting tickets per "tier|tenant" (active
	// flows, at most 50 per tier).
	TenantBacklog map[string]int64
}

// Stats returns a model's admission counters.
func (s *Scheduler) Stats(ctx context.Context, model string) (Stats, error) {
	keys, _, err := s.keys(model)
	if err != nil {
		return Stats{}, err
	}
	res, err := script.Run(ctx, s.rdb, keys, "stats", s.now()).Slice()
	if err != nil {
		return Stats{}, fmt.Errorf("admission: stats: %w", err)
	}
	st := Stats{Backlog: map[string]int64{}, InTokens: map[string]int64{}, InJobs: map[string]int64{}, AdmTokens: map[string]int64{},
		AdmJobs: map[string]int64{}, AheadTokens: map[string]int64{}, BehindTokens: map[string]int64{}}
	us, _ := strconv.ParseInt(fmt.Sprint(res[0]), 10, 64)
	st.Now = time.UnixMicro(us)
	for i, c := range Classes {
		st.Backlog[c], _ = res[1+i].(int64)
	}
	st.Released, _ = res[5].(int64)
	kv, _ := res[6].([]any)
	for i := 0; i+1 < len(kv); i += 2 {
		k, _ := kv[i].(string)
		v, _ := strconv.ParseInt(fmt.Sprint(kv[i+1]), 10, 64)
		name, class, ok := strings.Cut(k, ":")
		if !ok {
			continue
		}
		switch name {
		case "in_tok":
			st.InTokens[class] = v
		case "in_n":
			st.InJobs[class] = v
		case "adm_tok":
			st.AdmTokens[class] = v
		case "adm_n":
			st.AdmJobs[class] = v
		case "ahead_tok":
			st.AheadTokens[class] = v
		case "behind_tok":
			st.BehindTokens[class] = v
		}
	}
	st.TenantBacklog = map[string]int64{}
	if len(res) > 7 {
		tb, _ := res[7].([]any)
		for i := 0; i+1 < len(tb); i += 2 {
			k, _ := tb[i].(string)
			n, _ := tb[i+1].(int64)
			st.TenantBacklog[k] = n
		}
	}
	recent, err := s.rdb.LRange(ctx, keys[15], 0, -1).Result()
	if err != nil {
		return Stats{}, fmt.Errorf("admission: stats: %w", err)
	}
	st.Waits = map[string][]time.Duration{}
	for _, r := range recent {
		class, us, ok := strings.Cut(r, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(us, 10, 64)
		st.Waits[class] = append(st.Waits[class], time.Duration(n)*time.Microsecond)
	}
	return st, nil
}
