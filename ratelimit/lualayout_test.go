package ratelimit

import (
	"strings"
	"testing"

	"github.com/prq-dev/prq/internal/lualayout"
)

// TestLuaLayout: every Lua file is at most 300 lines; a script's own
// file (bucket.lua, quota.lua) names its KEYS, ARGV and reply in its
// header; and the library's parts, read in LuaLibrary's order with
// bucket.lua after them, name the locals they take ("Uses:") and give
// ("Defines:") exactly (lualayout.Check).
func TestLuaLayout(t *testing.T) {
	t.Parallel()
	files := []lualayout.File{
		{Name: "bucket_slots.lua", Src: bucketSlots}, {Name: "bucket_load.lua", Src: bucketLoad},
		{Name: "bucket_wait.lua", Src: bucketWait}, {Name: "bucket_change.lua", Src: bucketChange},
		{Name: "bucket.lua", Src: bucketOps},
	}
	if got := strings.Join([]string{bucketSlots, bucketLoad, bucketWait, bucketChange}, "\n"); got != LuaLibrary {
		t.Fatal("LuaLibrary is not its four parts in order")
	}
	for _, f := range append(files, lualayout.File{Name: "quota.lua", Src: quotaSource}) {
		if n := strings.Count(f.Src, "\n"); n > 300 {
			t.Errorf("%s has %d lines, more than 300", f.Name, n)
		}
		if !strings.HasPrefix(f.Src, "-- ") {
			t.Errorf("%s opens with no header comment", f.Name)
		}
	}
	for _, f := range []lualayout.File{files[4], {Name: "quota.lua", Src: quotaSource}} {
		var h strings.Builder
		for l := range strings.SplitSeq(f.Src, "\n") {
			if !strings.HasPrefix(l, "--") {
				break
			}
			h.WriteString(l + "\n")
		}
		for _, w := range []string{"KEYS", "ARGV"} {
			if !strings.Contains(h.String(), w) {
				t.Errorf("%s's header names no %s", f.Name, w)
			}
		}
		if !strings.Contains(h.String(), "Reply") && !strings.Contains(h.String(), "->") {
			t.Errorf("%s's header names no reply", f.Name)
		}
	}
	for _, p := range lualayout.Check(files) {
		t.Error(p)
	}
}
