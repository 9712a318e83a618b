package doccheck

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestSlug(t *testing.T) {
	tests := []struct{ heading, want string }{
		{"Several keys per model", "several-keys-per-model"},
		{"PrqProviderRateLimited", "prqproviderratelimited"},
		{"2. Register the GitHub App", "2-register-the-github-app"},
		{`What "held" means in the asynq web UI`, "what-held-means-in-the-asynq-web-ui"},
		{"GitHub's limits", "githubs-limits"},
		{"At scale: 100,000 held jobs", "at-scale-100000-held-jobs"},
		{"Chaos: kill -9, stalls, Redis restarts", "chaos-kill--9-stalls-redis-restarts"},
		{"`models[].limiter` and *you*", "modelslimiter-and-you"},
		{"snake_case stays, _emphasis_ goes", "snake_case-stays-emphasis-goes"},
		{"[A link](x.md) and ![an image](i.png)", "a-link-and-an-image"},
		{"Über straße", "über-straße"},
		{"A <em>tag</em> &amp; more", "a-tag--more"},
		{`Escaped \_under\_`, "escaped-_under_"},
	}
	for _, tt := range tests {
		t.Run(tt.heading, func(t *testing.T) {
			p := Parse([]byte("# " + tt.heading + "\n"))
			if !p.Anchors[tt.want] || len(p.Anchors) != 1 {
				t.Fatalf("anchors of %q: %v, want only %q", tt.heading, keys(p.Anchors), tt.want)
			}
		})
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestParse(t *testing.T) {
	src := strings.Join([]string{
		"# Title",                    // 1
		"## Title",                   // 2: title-1
		"## Title ##",                // 3: title-2
		"Text",                       // 4
		"===",                        // 5: a setext heading
		"",                           // 6
		`<a name="old"></a>`,         // 7
		"",                           // 8
		"```sh",                      // 9
		"# no heading [no](link.md)", // 10
		"```",                        // 11
		`See [a](a.md#x "title"), <a href="b.md">b</a>, [c](<c d.md>), [e](e.md?plain=1#L3), [r][] and ` + "`[f](f.md)`.", // 12
		"",                                       // 13
		"[r]: r.md",                              // 14
		"",                                       // 15
		"<!-- prq:fragment -->",                  // 16
		"",                                       // 17
		"~~~yaml title",                          // 18
		"a: 1",                                   // 19
		"~~~",                                    // 20
		"| <a id=\"cell\"></a>`x` | [t](t.md) |", // 21
		"|---|---|",
	}, "\n")
	p := Parse([]byte(src))
	if got, want := keys(p.Anchors), []string{"cell", "old", "text", "title", "title-1", "title-2"}; !slices.Equal(want, got) {
		t.Errorf("anchors: got %q, want %q", got, want)
	}
	wantLinks := []Link{{12, "a.md#x"}, {12, "b.md"}, {12, "c d.md"}, {12, "e.md?plain=1#L3"}, {12, "r.md"}, {21, "t.md"}}
	got := slices.Clone(p.Links)
	slices.SortFunc(got, func(a, b Link) int { return strings.Compare(a.Target, b.Target) })
	if !reflect.DeepEqual(wantLinks, got) {
		t.Errorf("links:\n got %v\nwant %v", got, wantLinks)
	}
	wantBlocks := []Block{{Line: 9, Lang: "sh", Text: "# no heading [no](link.md)\n"}, {Line: 18, Lang: "yaml", Text: "a: 1\n", Marker: "fragment"}}
	if !reflect.DeepEqual(wantBlocks, p.Blocks) {
		t.Errorf("blocks:\n got %+v\nwant %+v", p.Blocks, wantBlocks)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("# A\n[x](y.md#z)\n```yaml\na: 1\n```\n"))
	f.Add([]byte("`` ` ``\n<a id='q'>\n[x](<y\n~~~~\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		p := Parse(src) // must not panic
		for _, l := range p.Links {
			if l.Line < 1 || l.Line > strings.Count(string(src), "\n")+1 {
				t.Fatalf("link %q on line %d", l.Target, l.Line)
			}
		}
	})
}

func ExampleSlug() {
	fmt.Println(Slug("Providers that count in windows"))
	fmt.Println(Slug(`What "held" means`))
	// Output:
	// providers-that-count-in-windows
	// what-held-means
}
