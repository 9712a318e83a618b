package gateway

import (
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tiktoken-go/tokenizer"

	"github.com/prq-dev/prq/ratelimit"
)

// TestMaxTokenBytes: no token of the encodings the gateway counts with is
// longer than maxTokenBytes, the lower bound's divisor.
func TestMaxTokenBytes(t *testing.T) {
	t.Parallel()
	for _, enc := range []tokenizer.Encoding{tokenizer.O200kBase, tokenizer.Cl100kBase} {
		c, err := tokenizer.Get(enc)
		if err != nil {
			t.Fatal(err)
		}
		longest := 0
		for id := uint(0); id < 210000; id++ {
			if s, err := c.Decode([]uint{id}); err == nil {
				longest = max(longest, len(s))
			}
		}
		if longest > maxTokenBytes || longest == 0 {
			t.Fatalf("%s: the longest token is %d bytes, maxTokenBytes %d", enc, longest, maxTokenBytes)
		}
	}
}

// tricky are characters around the pre-tokenizer's cuts: letters of both
// cases, digits, every kind of whitespace, slashes, apostrophes,
// punctuation, non-ASCII letters, digits and spaces.
var tricky = []string{"a", "b", "Z", "Q", "7", "0", "12", " ", " ", "  ", "\n", "\r\n", "\t", "/", "'s", "'", ".", ",", "-", "=", "é", "中", "²", "\u00a0", "\u0301", "😀", "{", "\"", "https://x.y/z"}

func randomText(rng *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(tricky[rng.Intn(len(tricky))])
	}
	return b.String()
}

// TestPieceCountsAddUp: at every cut isCut allows, the counts of the two
// sides add up to the count of the whole, for both encodings, on random
// texts made of the characters around the cuts and on real source files.
func TestPieceCountsAddUp(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewSource(1))
	var texts []string
	for range 400 {
		texts = append(texts, randomText(rng, 5+rng.Intn(60)))
	}
	files, _ := filepath.Glob("*.go")
	for _, f := range files[:min(3, len(files))] {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, string(b[:min(len(b), 3000)]))
	}
	for _, model := range []string{"gpt-4o-mini", "gpt-4"} {
		tk, err := ratelimit.NewTokenizer(model)
		if err != nil {
			t.Fatal(err)
		}
		c, err := newCounter(tk)
		if err != nil {
			t.Fatal(err)
		}
		cuts := 0
		for _, s := range texts {
			whole, _ := c.raw(s)
			for p := 1; p < len(s); p++ {
				if !isCut(s, p) {
					continue
				}
				cuts++
				a, _ := c.raw(s[:p])
				b, _ := c.raw(s[p:])
				if a+b != whole {
					t.Fatalf("%s: cut at %d of %q: %d + %d tokens, the whole is %d", model, p, s, a, b, whole)
				}
			}
		}
		if cuts < 1000 {
			t.Fatalf("only %d cuts tried", cuts)
		}
	}
}

// TestCounterExact: counting in pieces gives CountMessages' count of
// large texts exactly, and stops past the budget.
func TestCounterExact(t *testing.T) {
	t.Parallel()
	var src strings.Builder
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		src.Write(b)
	}
	rng := rand.New(rand.NewSource(2))
	texts := []string{src.String(), strings.Repeat("word ", 20000), strings.Repeat("0,", 30000), randomText(rng, 50000), "", "hi"}
	tk, _ := ratelimit.NewTokenizer("gpt-4o-mini")
	c, err := newCounter(tk)
	if err != nil {
		t.Fatal(err)
	}
	want, err := tk.CountMessages(texts...)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.messages(texts, unlimited)
	if err != nil || got != want {
		t.Fatalf("counted %d (%v), CountMessages %d", got, err, want)
	}
	if got, _ := c.messages(texts, 1000); got <= 1000 || got > 1000+countChunk {
		t.Fatalf("with a budget of 1000: %d, want past it by at most a chunk", got)
	}
	// a stretch no cut divides counts a token per byte: never less than it is
	spaces := strings.Repeat(" ", maxStretch+countChunk+1)
	if got, _ := c.text(spaces, unlimited); got != int64(len(spaces)) {
		t.Fatalf("an uncut stretch of %d bytes counted %d", len(spaces), got)
	}
}

// TestScanLowerBound: the scan's least count is never more than the
// count, and every limit is enforced.
func TestScanLowerBound(t *testing.T) {
	t.Parallel()
	lim := scanLimits{depth: 4, items: 5, values: 30, scalar: 10}
	tests := []struct {
		name, body string
		want       string // "": fine; else what the error says
	}{
		{"fine", `{"model":"m","messages":[{"role":"user","content":"hello"}]}`, ""},
		{"escaped name", `{"mod\u0065l":"m"}`, ""},
		{"too deep", `{"a":[[[[1]]]]}`, "deep"},
		{"too many items", `{"a":[1,2,3,4,5,6]}`, "elements"},
		{"too many members", `{"a":{"b":1,"c":1,"d":1,"e":1,"f":1,"g":1}}`, "members"},
		{"too many values", `{"a":[[1,1,1,1,1],[1,1,1,1,1],[1,1,1,1,1],[1,1,1,1,1],[1,1,1,1,1],[1,1,1,1,1]]}`, "values"},
		{"long scalar", `{"model":"a very long model name"}`, "model"},
		{"not an object", `[1]`, "object"},
		{"trailing", `{} x`, "after"},
		{"cut", `{"a":"b`, "end"},
		{"bad escape", `{"a":"\x"}`, "escape"},
		{"bad number", `{"a":01}`, "','"},
	}
	for _, tt := range tests {
		_, err := scanBody([]byte(tt.body), lim, chatPolicy)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want an error about %q", tt.name, err, tt.want)
		}
	}
	var le *limitError
	if _, err := scanBody([]byte(`{"a":[[[[1]]]]}`), lim, chatPolicy); !errors.As(err, &le) {
		t.Errorf("a limit is a *limitError, got %T", err)
	}
	sc, _ := scanBody([]byte(`{"model":"gpt","mod\u0065l":"m2","messages":[]}`), scanLimits{depth: 9, items: 9, values: 99, scalar: 99}, chatPolicy)
	if sc.model != "m2" {
		t.Errorf("model %q, want the last one, m2", sc.model)
	}

	// the least count against the count, on random chat bodies
	tk, _ := ratelimit.NewTokenizer("gpt-4o-mini")
	c, _ := newCounter(tk)
	rng := rand.New(rand.NewSource(3))
	big := scanLimits{depth: 64, items: 10000, values: 1 << 19, scalar: 4096}
	for range 200 {
		body := randomChat(rng)
		sc, err := scanBody([]byte(body), big, chatPolicy)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		req, err := parseRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		texts, err := req.texts()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := c.messages(texts, unlimited)
		if sc.leastTokens() > n {
			t.Fatalf("least %d > count %d for %s", sc.leastTokens(), n, body)
		}
	}
}

func randomChat(rng *rand.Rand) string {
	q := func(s string) string {
		return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(s) + `"`
	}
	var msgs []string
	for range 1 + rng.Intn(4) {
		content := q(randomText(rng, rng.Intn(400)))
		if rng.Intn(2) == 0 {
			content = `[{"type":"text","text":` + q(strings.Repeat(" ", rng.Intn(300))) + `},{"type":"text","text":` + q(randomText(rng, 50)) + `}]`
		}
		msgs = append(msgs, `{"role":"user","content":`+content+`}`)
	}
	extra := ""
	if rng.Intn(2) == 0 {
		extra = `,"tools":[{"type":"function","function":{"name":"f","description":` + q(randomText(rng, 200)) + `,"parameters":{"type":"object","properties":{"n":{"type":"integer","maximum":12345}}}}}]`
	}
	return `{"model":"gpt-4o-mini","max_tokens":50,"messages":[` + strings.Join(msgs, ",") + `]` + extra + `}`
}
