package admission

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prq-dev/prq/ratelimit"
)

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
	// TenantBacklog counts waiting tickets per "class|tenant" (active
	// flows, at most 50 per class, chat included).
	TenantBacklog map[string]int64
	// OldestWait is how long the oldest waiting ticket has waited (0 when
	// none waits), by Redis's clock.
	OldestWait time.Duration
	// A window limiter's look-ahead: admission admits a job whose room
	// frees within LookAhead, the time its jobs take from admission to
	// their call, measured: StartLag (admission to the handler's start)
	// and Prep (the handler's start to its call), smoothed, each with
	// twice its mean deviation; at most a tenth of the window. The call
	// waits for room that has not come yet. All zero for a token bucket
	// (limiter auto: while it counts as one) and before a window's first
	// job.
	LookAhead, StartLag, Prep time.Duration
}

// Tokens returns a model's incoming and admitted tokens per class: the
// counters of Stats a rate is drawn from, in one read (Stats runs a
// script and reads the waits: fourteen commands).
func (s *Scheduler) Tokens(ctx context.Context, model string) (in, adm map[string]int64, err error) {
	keys, _, err := s.keys(model)
	if err != nil {
		return nil, nil, err
	}
	fields := make([]string, 0, 2*len(Classes))
	for _, c := range Classes {
		fields = append(fields, "in_tok:"+c, "adm_tok:"+c)
	}
	vals, err := s.rdb.HMGet(ctx, keys.Stats, fields...).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("admission: tokens: %w", err)
	}
	in, adm = map[string]int64{}, map[string]int64{}
	put := func(m map[string]int64, c string, v any) {
		if v != nil { // a class with nothing yet is absent, as in Stats
			m[c], _ = strconv.ParseInt(fmt.Sprint(v), 10, 64)
		}
	}
	for i, c := range Classes {
		put(in, c, vals[2*i])
		put(adm, c, vals[2*i+1])
	}
	return in, adm, nil
}

// Stats returns a model's admission counters.
func (s *Scheduler) Stats(ctx context.Context, model string) (Stats, error) {
	keys, b, err := s.keys(model)
	if err != nil {
		return Stats{}, err
	}
	res, err := statsScript.Run(ctx, s.rdb, keys.list(), s.now()).Slice()
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
	look := map[string]time.Duration{}
	for i := 0; i+1 < len(kv); i += 2 {
		k, _ := kv[i].(string)
		v, _ := strconv.ParseInt(fmt.Sprint(kv[i+1]), 10, 64)
		name, class, ok := strings.Cut(k, ":")
		if !ok {
			look[name] = time.Duration(v) * time.Microsecond
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
	if counting, err := b.Counting(ctx); err == nil && counting == ratelimit.LimiterWindow {
		l := b.Limits()
		st.StartLag, st.Prep = look["lag_us"], look["prep_us"]
		ahead := st.StartLag + st.Prep + 2*(look["lag_dev"]+look["prep_dev"])
		st.LookAhead = min(ahead, (l.Period+b.WindowMargin())/10)
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
	if oldest, err := s.rdb.ZRangeWithScores(ctx, keys.Age, 0, 0).Result(); err != nil {
		return Stats{}, fmt.Errorf("admission: stats: %w", err)
	} else if len(oldest) == 1 {
		st.OldestWait = max(st.Now.Sub(time.UnixMicro(int64(oldest[0].Score))), 0)
	}
	recent, err := s.rdb.LRange(ctx, keys.Waits, 0, -1).Result()
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
