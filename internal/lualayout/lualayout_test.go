package lualayout

import (
	"slices"
	"strings"
	"testing"
)

const first = `-- first: a library
-- Uses: (nothing)
-- Defines: give,
--   shared
local give = {}
local function shared(x) return x .. '--not a comment' end
local private = 1
`

func TestCheckAcceptsAnExplicitChain(t *testing.T) {
	second := "-- Uses: OP, give, shared\nlocal y = shared(give.x) -- private here is a comment\nif OP == 'private' then return y end\n"
	if p := Check([]File{{"first", first}, {"second", second}}, "OP"); len(p) > 0 {
		t.Fatalf("problems in a correct chain: %q", p)
	}
}

func TestCheckFindsEachKindOfProblem(t *testing.T) {
	cases := map[string]struct{ src, want string }{
		"a use not named":      {"-- Uses: give\nreturn shared(give)\n", `uses ["give" "shared"]`},
		"a name not used":      {"-- Uses: give, shared\nreturn give\n", `its header says ["give" "shared"]`},
		"a private local":      {"-- Uses: private\nreturn private\n", "uses private, which the file declaring it keeps to itself"},
		"no header":            {"return give\n", "no Uses:"},
		"a define not there":   {"-- Uses: (nothing)\n-- Defines: ghost\nlocal real = 1\n", "Defines: ghost, which it does not declare"},
		"a field is not a use": {"-- Uses: give\nreturn give.shared\n", ""},
	}
	for name, c := range cases {
		p := Check([]File{{"first", first}, {"second", c.src}})
		if c.want == "" {
			if len(p) > 0 {
				t.Errorf("%s: %q", name, p)
			}
			continue
		}
		if !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, c.want) }) {
			t.Errorf("%s: problems %q, want one saying %q", name, p, c.want)
		}
	}
}

func TestDeclaresReadsTopLevelLocalsOnly(t *testing.T) {
	got := Declares("local a, b = 1, 2\nlocal function c() local d = 1 end\n  local e = 3\n-- local f\nlocal g\n")
	if want := []string{"a", "b", "c", "g"}; !slices.Equal(got, want) {
		t.Fatalf("Declares = %q, want %q", got, want)
	}
}
