package bench

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// tallyStep is the resolution of a tally: counts are kept per step, so
// a window's share can be cut out afterwards.
const tallyStep = 100 * time.Millisecond

// redisTally is a go-redis hook that counts what a process's client
// sends to Redis: every command by name, and every script call (EVALSHA,
// EVAL) by the script's name, in steps of tallyStep. Installed after
// prq's own hooks (the dispatch gate), it counts what reaches Redis, not
// what a hook answered itself. Redis's INFO commandstats counts the
// commands inside scripts as well; this counts what clients send.
type redisTally struct {
	names scriptNamer
	now   func() time.Time
	mu    sync.Mutex
	steps map[int64]map[tallyKey]int64 // unix ms of the step's start
}

// tallyKey is what is counted: a command ("command", "hget") or a script
// call ("script", "admission admit").
type tallyKey struct{ kind, name string }

// tallyRow is one count of a step, as a worker reports it.
type tallyRow struct {
	T    int64  `json:"t"` // the step's start, unix ms
	Kind string `json:"kind"`
	Name string `json:"name"`
	N    int64  `json:"n"`
}

func newRedisTally(names scriptNamer) *redisTally {
	return &redisTally{names: names, now: time.Now, steps: map[int64]map[tallyKey]int64{}}
}

var _ redis.Hook = (*redisTally)(nil)

func (t *redisTally) DialHook(next redis.DialHook) redis.DialHook { return next }

func (t *redisTally) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(untalliedKey{}) == nil {
			t.count(cmd)
		}
		return next(ctx, cmd)
	}
}

func (t *redisTally) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(untalliedKey{}) == nil {
			for _, c := range cmds {
				t.count(c)
			}
		}
		return next(ctx, cmds)
	}
}

type untalliedKey struct{}

// untallied marks ctx's commands as the bench's own, not counted (Redis
// still counts them: they are a small, steady share of INFO's figures).
func untallied(ctx context.Context) context.Context {
	return context.WithValue(ctx, untalliedKey{}, true)
}

func (t *redisTally) count(cmd redis.Cmder) {
	args := cmd.Args()
	name := strings.ToLower(cmd.Name())
	keys := []tallyKey{{"command", name}}
	if script, ok := t.scriptOf(name, args); ok {
		keys = append(keys, tallyKey{"script", script})
	}
	t.mu.Lock()
	m := t.step()
	for _, k := range keys {
		m[k]++
	}
	t.mu.Unlock()
}

// add counts n of kind and name in the current step (the no-op
// provider's CPU, "cpu" "upstream", in ns).
func (t *redisTally) add(kind, name string, n int64) {
	t.mu.Lock()
	t.step()[tallyKey{kind, name}] += n
	t.mu.Unlock()
}

// step is the current step's counts; t.mu is held.
func (t *redisTally) step() map[tallyKey]int64 {
	at := t.now().UnixMilli() / tallyStep.Milliseconds() * tallyStep.Milliseconds()
	m := t.steps[at]
	if m == nil {
		m = map[tallyKey]int64{}
		t.steps[at] = m
	}
	return m
}

// scriptOf names the script a command runs (EVALSHA sha numkeys keys…
// args…, or EVAL with the source): false for any other command.
func (t *redisTally) scriptOf(name string, args []any) (string, bool) {
	if len(args) < 3 {
		return "", false
	}
	var sha string
	switch name {
	case "evalsha", "evalsha_ro":
		sha = fmt.Sprint(args[1])
	case "eval", "eval_ro":
		sha = sha1Hex(fmt.Sprint(args[1]))
	default:
		return "", false
	}
	first := ""
	if n, err := strconv.Atoi(fmt.Sprint(args[2])); err == nil && n >= 0 && 3+n < len(args) {
		first = fmt.Sprint(args[3+n])
	}
	return t.names.name(sha, first), true
}

// rows returns the counts, step by step.
func (t *redisTally) rows() []tallyRow {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []tallyRow
	for step, m := range t.steps {
		for k, n := range m {
			out = append(out, tallyRow{T: step, Kind: k.kind, Name: k.name, N: n})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].T != out[j].T {
			return out[i].T < out[j].T
		}
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// tallyWindow sums the rows of the steps that start in [from, to): the
// commands and the script calls by name (other kinds: tallyKind). Steps cut by the edges count
// whole where they start inside; with 100 ms steps over a window of
// seconds that is a few percent at most.
func tallyWindow(rows []tallyRow, from, to time.Time) (commands, scripts map[string]int64) {
	commands, scripts = map[string]int64{}, map[string]int64{}
	a, b := from.UnixMilli(), to.UnixMilli()
	for _, r := range rows {
		if r.T < a || r.T >= b {
			continue
		}
		switch r.Kind {
		case "command":
			commands[r.Name] += r.N
		case "script":
			scripts[r.Name] += r.N
		}
	}
	return commands, scripts
}

// tallyKind sums one kind's counts of name over the steps that start in
// [from, to).
func tallyKind(rows []tallyRow, kind, name string, from, to time.Time) int64 {
	var n int64
	a, b := from.UnixMilli(), to.UnixMilli()
	for _, r := range rows {
		if r.T >= a && r.T < b && r.Kind == kind && r.Name == name {
			n += r.N
		}
	}
	return n
}
