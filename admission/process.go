package admission

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

//go:embed lua/process.lua
var processLua string

var processScript = redis.NewScript(processLua)

//go:embed lua/release.lua
var releaseLua string

var releaseScript = redis.NewScript(releaseLua)

// asynq's lease on an active task (v0.26, not configurable).
const asynqLease = 30 * time.Second

// processesKey lists worker processes by their last heartbeat.
const processesKey = "prq:procs"

// jobsRecordTTL bounds a process's record of its running jobs, set by
// the job that creates it and renewed by the beat after any job starts.
const jobsRecordTTL = 24 * time.Hour

// jobsKey is a process's running jobs: task id -> queue.
func jobsKey(process string) string { return "prq:proc:{" + process + "}:jobs" }

// Process is one worker process's liveness record: a heartbeat every
// beat, and the jobs it runs. When its heartbeat stops, any process's
// admission loop puts those jobs back through admission within seconds,
// instead of after asynq's lease (30s) and recoverer (once a minute).
type Process struct {
	s  *Scheduler
	id string
	// ran is set when Track wrote the record since the last beat: that
	// beat renews its TTL (an idle process's beat sends nothing more)
	ran atomic.Bool
	// running counts the jobs Track runs now
	running atomic.Int64
	// finished holds the jobs that ended since the last beat, which
	// takes them out of the record in one HDEL; flush orders that HDEL
	// and a job's start (a job that starts again meanwhile is no longer
	// finished, and its new entry stays)
	flush    sync.RWMutex
	mu       sync.Mutex
	finished map[string]struct{}
}

// Process returns the liveness record of the process named id (unique
// per process; no '{' or '}').
func (s *Scheduler) Process(id string) *Process { return &Process{s: s, id: id} }

// Beat records that the process is alive.
func (p *Process) Beat(ctx context.Context) error {
	if _, err := p.beat(ctx, "beat", p.s.now(), p.id); err != nil {
		return fmt.Errorf("admission: heartbeat: %w", err)
	}
	return nil
}

// beat runs the process script's beat with args and, when a job was
// recorded since the last beat, in the same round trip renews the TTL of
// the process's record of its running jobs (Track's own, pipelined with
// its write, may have been lost with its connection) and takes the jobs
// that finished since out of it.
func (p *Process) beat(ctx context.Context, args ...any) ([]string, error) {
	keys := []string{processesKey}
	var res *redis.Cmd
	// the flush lock orders the HDEL against job starts; held for the
	// pipeline only
	p.flush.Lock()
	p.mu.Lock()
	done := p.finished
	p.finished = nil
	p.mu.Unlock()
	if ran := p.ran.Swap(false); ran || len(done) > 0 {
		pipe := p.s.rdb.Pipeline()
		res = processScript.EvalSha(ctx, pipe, keys, args...)
		var renew, del redis.Cmder
		if ran {
			renew = pipe.Expire(ctx, jobsKey(p.id), jobsRecordTTL)
		}
		if len(done) > 0 {
			del = pipe.HDel(ctx, jobsKey(p.id), slices.Collect(maps.Keys(done))...)
		}
		_, _ = pipe.Exec(ctx) // each command's error is its own
		if renew != nil && renew.Err() != nil {
			p.ran.Store(true) // the next beat renews it
		}
		if del != nil && del.Err() != nil { // the next beat takes them out
			p.mu.Lock()
			for id := range done {
				p.finish(id)
			}
			p.mu.Unlock()
		}
		p.flush.Unlock()
		if redis.HasErrorPrefix(res.Err(), "NOSCRIPT") { // a Redis that has not seen it yet (or restarted)
			res = processScript.Run(ctx, p.s.rdb, keys, args...)
		}
	} else {
		p.flush.Unlock() // nothing to take out
		res = processScript.Run(ctx, p.s.rdb, keys, args...)
	}
	if len(args) < 4 { // no ttl: the beat answers nothing
		return nil, res.Err()
	}
	return res.StringSlice()
}

// Leave removes the record on a clean exit (asynq has requeued what was
// running).
func (p *Process) Leave(ctx context.Context) error {
	pipe := p.s.rdb.TxPipeline()
	pipe.ZRem(ctx, processesKey, p.id)
	pipe.Del(ctx, jobsKey(p.id))
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("admission: leave: %w", err)
	}
	return nil
}

// Track wraps a job handler so the process's record names the jobs it
// runs. If the record cannot be written the job still runs; a crash then
// waits for asynq's own recovery.
func (p *Process) Track(h asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		q, _ := asynq.GetQueueName(ctx)
		if err := p.start(ctx, id, q); err != nil {
			p.s.log.WarnContext(ctx, "could not record a running job; if this process dies, asynq recovers it in a minute or two", "task", id, "err", err)
		}
		defer p.end(id)
		return h.ProcessTask(ctx, t)
	})
}

// start records job id (of queue q) running. The record outlives no
// process for long: a dead one's is read and deleted by recovery within
// seconds, and the TTL bounds one that nothing recovers (its jobs are
// asynq's to recover then). The write and its TTL are pipelined, not a
// MULTI: a TTL lost with the connection is renewed by the next beat.
// Only the first of the jobs running at once may create the record: the
// others' write skips the TTL (one EXPIRE a job before), which the beat
// renews: ran is set after the write, so a beat follows it even when the
// beat's HDEL removed the record just before this HSET created it again.
func (p *Process) start(ctx context.Context, id, q string) error {
	var err error
	p.flush.RLock()
	p.mu.Lock()
	delete(p.finished, id)
	p.mu.Unlock()
	if p.running.Add(1) == 1 {
		pipe := p.s.rdb.Pipeline()
		pipe.HSet(ctx, jobsKey(p.id), id, q)
		pipe.Expire(ctx, jobsKey(p.id), jobsRecordTTL)
		_, err = pipe.Exec(ctx)
	} else {
		err = p.s.rdb.HSet(ctx, jobsKey(p.id), id, q).Err()
	}
	p.flush.RUnlock()
	p.ran.Store(true)
	return err
}

// end records job id finished: it leaves the record at the next beat
// (one HDEL a beat, not one a job); recovery, which takes back only
// jobs asynq still has active, leaves it alone meanwhile.
func (p *Process) end(id string) {
	p.running.Add(-1)
	p.mu.Lock()
	p.finish(id)
	p.mu.Unlock()
}

// finish marks job id finished (p.mu held).
func (p *Process) finish(id string) {
	if p.finished == nil {
		p.finished = map[string]struct{}{}
	}
	p.finished[id] = struct{}{}
}

// RecoverDead puts the jobs of processes silent for longer than ttl back:
// a job that goes through admission is held again and its ticket
// registered, any other job goes to the front of its queue. A job is
// taken back only while asynq still has it active under the dead
// process's lease, so a job another process has picked up since is left
// alone. It returns how many jobs it put back.
func (s *Scheduler) RecoverDead(ctx context.Context, rc RunConfig, ttl time.Duration) (int, error) {
	res, err := processScript.Run(ctx, s.rdb, []string{processesKey}, "dead", s.now(), ttl.Microseconds()).StringSlice()
	if err != nil {
		return 0, fmt.Errorf("admission: find dead processes: %w", err)
	}
	return s.recoverFound(ctx, rc, ttl, res)
}

// beatFindDead beats for p and, in the same script, finds the processes
// silent for longer than ttl (RecoverDead's first step): one call a beat.
func (p *Process) beatFindDead(ctx context.Context, ttl time.Duration) ([]string, error) {
	res, err := p.beat(ctx, "beat", p.s.now(), p.id, ttl.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("admission: heartbeat: %w", err)
	}
	return res, nil
}

// recoverFound puts back the jobs of the dead processes found: process,
// last beat µs, ...
func (s *Scheduler) recoverFound(ctx context.Context, rc RunConfig, ttl time.Duration, res []string) (int, error) {
	moved := 0
	for i := 0; i+1 < len(res); i += 2 {
		dead := res[i]
		seenUS, _ := strconv.ParseFloat(res[i+1], 64)
		jobs, err := s.rdb.HGetAll(ctx, jobsKey(dead)).Result()
		if err != nil {
			return moved, fmt.Errorf("admission: jobs of dead process %s: %w", dead, err)
		}
		// asynq extends a lease to 30s past its own heartbeat; the dead
		// process's leases end at most a beat past its last beat plus that
		latest := time.UnixMicro(int64(seenUS)).Add(asynqLease + ttl + 5*time.Second)
		for id, queue := range jobs {
			ok, err := s.requeue(ctx, rc, dead, queue, id, latest)
			if err != nil {
				return moved, err
			}
			if ok {
				moved++
			}
		}
		pipe := s.rdb.TxPipeline()
		pipe.Del(ctx, jobsKey(dead))
		pipe.ZRem(ctx, processesKey, dead)
		if _, err := pipe.Exec(ctx); err != nil {
			return moved, fmt.Errorf("admission: forget dead process %s: %w", dead, err)
		}
		s.log.WarnContext(ctx, "a worker process stopped beating; its jobs were put back", "process", dead, "jobs", len(jobs))
	}
	return moved, nil
}

// requeue puts one job of a dead process back, if it is still its.
func (s *Scheduler) requeue(ctx context.Context, rc RunConfig, dead, queue, id string, latest time.Time) (bool, error) {
	if s.insp == nil {
		return false, nil
	}
	info, err := s.insp.GetTaskInfo(queue, id)
	if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
		return false, nil // done and gone
	}
	if err != nil {
		return false, fmt.Errorf("admission: recover %s: %w", id, err)
	}
	if info.State != asynq.TaskStateActive {
		return false, nil
	}
	var t Ticket
	held := false
	if rc.TicketOf != nil {
		t, held = rc.TicketOf(info)
	}
	if held && rc.Moved != nil {
		t = rc.Moved(ctx, t)
	}
	p := "asynq:{" + queue + "}:"
	keys := []string{p + "active", p + "lease", p + "t:" + id, p + "pending"}
	mode := "pending"
	now := time.Now()
	if s.cfg.NowFunc != nil {
		now = s.cfg.NowFunc()
	}
	if held {
		keys[3], mode = p+"retry", "held"
	}
	n, err := processScript.Run(ctx, s.rdb, keys, "requeue", s.now(), id, dead, latest.Unix(), mode, now.Add(s.cfg.Hold).Unix()).Int()
	if err != nil {
		return false, fmt.Errorf("admission: recover %s: %w", id, err)
	}
	if n == 0 {
		return false, nil
	}
	if held {
		// a failure here leaves a held task without a ticket: the
		// reconciler adopts it from the retry set on its next pass
		reg, err := s.Register(ctx, t)
		if err != nil {
			return true, err
		}
		if !reg {
			// its ticket is still released (it died before recording its
			// start): its admission stands, release it again
			if err := s.insp.RunTask(queue, id); err != nil {
				return true, fmt.Errorf("admission: recover %s: release: %w", id, err)
			}
		}
	}
	s.log.InfoContext(ctx, "put back a job of a dead worker process", "task", id, "queue", queue, "held", held)
	return true, nil
}

// watchProcesses beats for this process and puts back the jobs of dead
// ones, every beat, until ctx ends. It judges others only after beating
// without a miss for a whole ttl itself: after a Redis outage every
// process's last beat is old, and none of them is dead.
func (s *Scheduler) watchProcesses(ctx context.Context, rc RunConfig) {
	t := time.NewTicker(rc.Beat)
	defer t.Stop()
	var beating time.Time // since when every beat succeeded
	for {
		// once judging, the beat finds the dead too (one script a beat)
		judging := !beating.IsZero() && time.Since(beating) >= rc.ProcessTTL
		var dead []string
		var err error
		if judging {
			dead, err = rc.Process.beatFindDead(ctx, rc.ProcessTTL)
		} else {
			err = rc.Process.Beat(ctx)
		}
		if err != nil {
			beating = time.Time{}
			if ctx.Err() == nil {
				s.log.WarnContext(ctx, "heartbeat failed", "err", err)
			}
		} else if beating.IsZero() {
			beating = time.Now()
		}
		if len(dead) > 0 {
			if _, err := s.recoverFound(ctx, rc, rc.ProcessTTL, dead); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "recovering a dead process's jobs failed", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// RunningNow reports whether a process that beat within fresh names the
// job among those it runs (asynq's own worker list lags by its 5s
// heartbeat).
func (s *Scheduler) RunningNow(ctx context.Context, id string, fresh time.Duration) (bool, error) {
	alive, err := processScript.Run(ctx, s.rdb, []string{processesKey}, "alive", s.now(), fresh.Microseconds()).StringSlice()
	if err != nil {
		return false, fmt.Errorf("admission: live processes: %w", err)
	}
	for _, p := range alive {
		if ok, err := s.rdb.HExists(ctx, jobsKey(p), id).Result(); err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// KeepBeating beats every interval until stop is called: for a process
// that has stopped admitting but still finishes running jobs (a graceful
// shutdown), so nobody takes them back meanwhile.
func (p *Process) KeepBeating(every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if err := p.Beat(ctx); err != nil && ctx.Err() == nil {
				p.s.log.WarnContext(ctx, "heartbeat failed", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
