package ratelimit

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"

	"github.com/prq-dev/prq/internal/fifo"
)

// TestCountMemo: a long message counts the same whether counted or
// remembered, across more distinct messages than the memo holds, and the
// memo never holds more than its size of them (a small memo here; the
// shared one holds memoSize), remembered by their hash.
func TestCountMemo(t *testing.T) {
	tk, err := NewTokenizer("gpt-4o")
	if err != nil {
		t.Fatal(err)
	}
	const size = 64
	tk = &Tokenizer{codec: tk.codec, memo: fifo.New[int](size, size*sha256.Size)}
	fresh := &Tokenizer{codec: tk.codec} // no memo: the codec's own count
	long := func(i int) string {
		return strings.Repeat(fmt.Sprintf("func f%d(x int) int { return x * %d } // ünïcode\n", i, i), 40)
	}
	for round := range 2 {
		for i := range size + 50 {
			s := long(i)
			got, err := tk.CountMessages("short", s)
			if err != nil {
				t.Fatal(err)
			}
			want, err := fresh.CountMessages("short", s)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("round %d, message %d: counted %d, want %d", round, i, got, want)
			}
		}
	}
	if n, _ := tk.memo.Len(); n != size {
		t.Fatalf("the memo holds %d messages, want %d", n, size)
	}
	sum := sha256.Sum256([]byte(long(size + 49)))
	if _, ok := tk.memo.Get(string(sum[:])); !ok {
		t.Fatal("the last long message is not remembered by its hash")
	}
	short := sha256.Sum256([]byte("short"))
	if _, ok := tk.memo.Get(string(short[:])); ok {
		t.Fatal("a short message was remembered")
	}
}

// BenchmarkCountSharedContext: a head's shared context (about 2,500
// tokens) counted again for each of its files, remembered and not.
func BenchmarkCountSharedContext(b *testing.B) {
	tk, err := NewTokenizer("gpt-4o")
	if err != nil {
		b.Fatal(err)
	}
	context := strings.Repeat("+\tif err := s.store.Put(ctx, key, value); err != nil { return fmt.Errorf(\"put %s: %w\", key, err) }\n", 250)
	for _, bc := range []struct {
		name string
		tk   *Tokenizer
	}{{"remembered", tk}, {"counted", &Tokenizer{codec: tk.codec}}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := bc.tk.CountMessages("system", context, "Task: review the file"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
