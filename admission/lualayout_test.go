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

	"github.com/prq-dev/prq/internal/lualayout"
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
	// the per-key pairs start after the table: the prelude's count and
	// offsets name its length
	code := lualayout.Strip(lua("prelude.lua"))
	for _, want := range []string{
		fmt.Sprintf("#KEYS - %d", len(keyTable)), fmt.Sprintf("#KEYS >= %d", len(keyTable)+1),
		fmt.Sprintf("KEYS[%d + 2 * i]", len(keyTable)+1), fmt.Sprintf("KEYS[%d + 2 * i]", len(keyTable)+2),
	} {
		if !strings.Contains(code, want) {
			t.Errorf("prelude.lua has no %q: the key pairs do not start after keyTable's %d keys", want, len(keyTable))
		}
	}
	fixed := regexp.MustCompile(`KEYS\[(\d+)\]`)
	files := slices.Clone(sharedFiles)
	for _, fs := range opFiles {
		files = append(files, fs...)
	}
	for _, f := range files {
		for _, m := range fixed.FindAllStringSubmatch(lualayout.Strip(lua(f)), -1) {
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
	heads := []string{"process.lua", "release.lua"}
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
	// ratelimit's library is one file here: of its locals it gives B
	// (its parts' own layout: ratelimit's TestLuaLayout)
	lib := lualayout.File{Name: "ratelimit.LuaLibrary", Src: "-- Uses: (nothing)\n-- Defines: B\n\n" + ratelimit.LuaLibrary}
	for op, files := range opFiles {
		chain := []lualayout.File{lib}
		for _, f := range append(slices.Clone(sharedFiles), files...) {
			chain = append(chain, lualayout.File{Name: f, Src: lua(f)})
		}
		for _, p := range lualayout.Check(chain, "OP") {
			t.Errorf("%s: %s", op, p)
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
		At      int64    `json:"at"`
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
			Called: c.Called, Timed: c.Timed, Written: c.Written, Way: c.Way, At: c.At}
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
			strconv.FormatInt(c.StartAt, 10), b(c.Called), b(c.Timed), b(c.Written), strconv.FormatInt(c.Way, 10), strconv.FormatInt(c.At, 10)}
		lg := make([]string, len(v))
		for i, x := range v {
			lg[i] = fmt.Sprint(x)
		}
		if !slices.Equal(lg, lw) {
			t.Errorf("Lua reads %q as\n %q\nwant %q", c.Stored, lg, lw)
		}
	}
}
