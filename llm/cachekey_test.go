package llm

import "testing"

func TestWithMember(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"object", `{"model":"m"}`, `{"prompt_cache_key":"k\"1","model":"m"}`},
		{"empty object", `{}`, `{"prompt_cache_key":"k\"1"}`},
		{"spaces", " \n{ \"a\":1}", `{"prompt_cache_key":"k\"1","a":1}`},
		{"not an object", `[1]`, `[1]`},
		{"nothing", ``, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(withMember([]byte(tc.in), "prompt_cache_key", `k"1`)); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}
