package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// TestLuaKeysMatchTable: prelude.lua's header names the KEYS every
// script reads in keyTable's order, and no script reads a fixed KEYS
// index past the table (the per-key pairs are read by keystate and
// keypaused alone).
func TestLuaKeysMatchTable(t *testing.T) {
	t.Parallel()
	var names []string
	line := regexp.MustCompile(`^--\s+KEYS\[(\d+)\] (\S+)`)
	for l := range strings.SplitSeq(lua("prelude.lua"), "\n") {
		if m := line.FindStringSubmatch(l); m != nil {
			if n, _ := strconv.Atoi(m[1]); n != len(names)+1 {
				t.Fatalf("prelude.lua names KEYS[%s] after %d keys", m[1], len(names))
			}
			names = append(names, m[2])
		}
	}
	var table []string
	for _, e := range keyTable {
		table = append(table, e.name)
	}
	if !slices.Equal(names, table) {
		t.Fatalf("prelude.lua's KEYS\n %q\nkeyTable\n %q", names, table)
	}
	// and keySet.list follows the table
	ks := newKeySet(mustBucket(t))
	for i, k := range ks.list()[:len(keyTable)] {
		if k != keyTable[i].of(ks) {
			t.Fatalf("list()[%d] = %q, the table's %q", i, k, keyTable[i].of(ks))
		}
	}
	fixed := regexp.MustCompile(`KEYS\[(\d+)\]`)
	files := slices.Clone(sharedFiles)
	for _, fs := range opFiles {
		files = append(files, fs...)
	}
	for _, f := range files {
		for _, m := range fixed.FindAllStringSubmatch(stripLua(lua(f)), -1) {
			if n, _ := strconv.Atoi(m[1]); n < 1 || n > len(keyTable) {
				t.Errorf("%s reads KEYS[%d], outside keyTable", f, n)
			}
		}
	}
}

func mustBucket(t *testing.T) *ratelimit.Bucket {
	t.Helper()
	b, err := ratelimit.NewKeyedBucket(nil, "layout", []string{"sk-a", "sk-b"}, ratelimit.Limits{RequestsPerPeriod: 1, TokensPerPeriod: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// stripLua drops comments and string literals, leaving the code.
func stripLua(src string) string {
	var b strings.Builder
	for i := 0; i < len(src); i++ {
		switch c := src[i]; {
		case c == '-' && strings.HasPrefix(src[i:], "--"):
			for i < len(src) && src[i] != '\n' {
				i++
			}
			b.WriteByte('\n')
		case c == '\'' || c == '"':
			for i++; i < len(src) && src[i] != c; i++ {
				if src[i] == '\\' {
					i++
				}
			}
			b.WriteString(`""`)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

var (
	topLocal  = regexp.MustCompile(`(?m)^local (?:function )?([A-Za-z_][\w, ]*?)\s*(?:=|\(|$)`)
	luaIdent  = regexp.MustCompile(`[A-Za-z_]\w*`)
	headerSet = regexp.MustCompile(`^-- (Uses|Defines): ?(.*)$`)
)

// luaDefines returns the locals a file declares at its top level.
func luaDefines(src string) []string {
	var out []string
	for _, m := range topLocal.FindAllStringSubmatch(stripLua(src), -1) {
		for n := range strings.SplitSeq(m[1], ",") {
			out = append(out, strings.TrimSpace(n))
		}
	}
	return out
}

// luaUses returns the names of given (an earlier file's locals) that
// src uses and does not declare itself at its top level.
func luaUses(src string, given map[string]bool) []string {
	own := map[string]bool{}
	for _, n := range luaDefines(src) {
		own[n] = true
	}
	code := stripLua(src)
	seen := map[string]bool{}
	var out []string
	for _, ix := range luaIdent.FindAllStringIndex(code, -1) {
		n := code[ix[0]:ix[1]]
		if ix[0] > 0 && (code[ix[0]-1] == '.' || code[ix[0]-1] == ':') {
			continue // a field
		}
		if given[n] && !own[n] && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// luaHeader returns a file's "Uses:" and "Defines:" lists (continued on
// lines that start "--   ").
func luaHeader(src string) (uses, defines []string, ok bool) {
	lists := map[string]*[]string{"Uses": &uses, "Defines": &defines}
	var cur *[]string
	for l := range strings.SplitSeq(src, "\n") {
		if !strings.HasPrefix(l, "--") {
			break
		}
		if m := headerSet.FindStringSubmatch(l); m != nil {
			ok = true
			cur = lists[m[1]]
			l = m[2]
		} else if cur == nil || !strings.HasPrefix(l, "--   ") {
			cur = nil
			continue
		} else {
			l = strings.TrimPrefix(l, "--")
		}
		for n := range strings.SplitSeq(l, ",") {
			if n = strings.TrimSpace(n); n != "" && !strings.HasPrefix(n, "(") {
				*cur = append(*cur, n)
			}
		}
	}
	return uses, defines, ok
}

// TestLuaLayout: every admission Lua file is at most 300 lines and
// opens with a header; in every operation's script, each file's "Uses:"
// names exactly the locals it takes from the files before it, and each
// of those is in the "Defines:" of the file declaring it (which declares
// it: a file's other locals are its own). From ratelimit's library only
// B may be used.
func TestLuaLayout(t *testing.T) {
	t.Parallel()
	entries, _ := luaFiles.ReadDir("lua")
	for _, e := range entries {
		src := lua(e.Name())
		if n := strings.Count(src, "\n"); n > 300 {
			t.Errorf("%s has %d lines, more than 300", e.Name(), n)
		}
		if !strings.HasPrefix(src, "-- ") {
			t.Errorf("%s opens with no header comment", e.Name())
		}
	}
	// a script's own file (the last of its files) names its KEYS, ARGV
	// and reply in its header
	heads := []string{"process.lua"}
	for _, fs := range opFiles {
		heads = append(heads, fs[len(fs)-1])
	}
	for _, f := range heads {
		var h strings.Builder
		for l := range strings.SplitSeq(lua(f), "\n") {
			if !strings.HasPrefix(l, "--") {
				break
			}
			h.WriteString(l + "\n")
		}
		for _, w := range []string{"KEYS", "ARGV", "Reply"} {
			if !strings.Contains(h.String(), w) {
				t.Errorf("%s's header names no %s", f, w)
			}
		}
	}
	for op, files := range opFiles {
		// given: every local of the files before (to find uses);
		// exported: those a file gives the next in its header
		given := map[string]bool{"OP": true}
		exported := map[string]bool{"OP": true, "B": true}
		for _, n := range luaDefines(ratelimit.LuaLibrary) {
			given[n] = true
		}
		all := append(slices.Clone(sharedFiles), files...)
		for _, f := range all {
			src := lua(f)
			uses, defines, ok := luaHeader(src)
			if !ok && f != "ticket.lua" {
				t.Errorf("%s (%s): no Uses: in its header", f, op)
			}
			got := luaUses(src, given)
			if f == "ticket.lua" {
				uses = nil // takes nothing
			}
			slices.Sort(got)
			slices.Sort(uses)
			if !slices.Equal(got, uses) {
				t.Errorf("%s (%s): uses %q of the files before it, its header says %q", f, op, got, uses)
			}
			for _, n := range got {
				if !exported[n] {
					t.Errorf("%s (%s) uses %s, which the file declaring it keeps to itself (no Defines:)", f, op, n)
				}
			}
			own := luaDefines(src)
			for _, n := range defines {
				if !slices.Contains(own, n) {
					t.Errorf("%s's header Defines: %s, which it does not declare", f, n)
				}
			}
			if f == "ticket.lua" {
				defines = own // the ticket codec gives all it declares
			}
			for _, n := range own {
				given[n] = true
			}
			for _, n := range defines {
				exported[n] = true
			}
		}
	}
}

// luaReservation runs reservation.lua's resdecode on Redis: ARGV[1] the
// stored reservation, ARGV[2] the model's keys.
var luaReservation = redis.NewScript(ratelimit.LuaLibrary + "\nlocal NKEYS = tonumber(ARGV[2])\n" +
	lua("reservation.lua") + "\nreturn resdecode(ARGV[1])")

// TestReservationGolden: Go's parseReservation and Lua's resdecode read
// every golden case of testdata/reservations.json as it says.
func TestReservationGolden(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/reservations.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Stored  string   `json:"stored"`
		Keys    int      `json:"keys"`
		Costs   []string `json:"costs"`
		Dims    []string `json:"dims"`
		Key     int      `json:"key"`
		Started bool     `json:"started"`
		StartAt int64    `json:"start_at"`
		Called  bool     `json:"called"`
		Timed   bool     `json:"timed"`
		Written bool     `json:"written"`
		Way     int64    `json:"way"`
	}
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 10 {
		t.Fatalf("%d golden cases", len(cases))
	}
	rdb := redistest.Shared(t).Client(t)
	for _, c := range cases {
		want := reservation{Costs: c.Costs, Dims: c.Dims, Key: c.Key, Started: c.Started, StartAt: c.StartAt,
			Called: c.Called, Timed: c.Timed, Written: c.Written, Way: c.Way}
		if got := parseReservation(c.Stored, c.Keys); !reflect.DeepEqual(got, want) {
			t.Errorf("Go reads %q as\n %+v\nwant %+v", c.Stored, got, want)
		}
		if got, want := reservationKey(c.Stored, c.Keys), max(c.Key, 0); got != want {
			t.Errorf("reservationKey(%q) = %d, want %d", c.Stored, got, want)
		}
		v, err := luaReservation.Run(context.Background(), rdb, []string{"{golden}"}, c.Stored, c.Keys).Slice()
		if err != nil {
			t.Fatal(err)
		}
		b := func(x bool) string { return map[bool]string{true: "1", false: "0"}[x] }
		lw := []string{strings.Join(c.Costs, " "), strings.Join(c.Dims, ","), strconv.Itoa(c.Key), b(c.Started),
			strconv.FormatInt(c.StartAt, 10), b(c.Called), b(c.Timed), b(c.Written), strconv.FormatInt(c.Way, 10)}
		lg := make([]string, len(v))
		for i, x := range v {
			lg[i] = fmt.Sprint(x)
		}
		if !slices.Equal(lg, lw) {
			t.Errorf("Lua reads %q as\n %q\nwant %q", c.Stored, lg, lw)
		}
	}
}
