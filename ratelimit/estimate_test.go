package ratelimit

import (
	"fmt"
	"strings"
	"testing"
)

// TestCountMemo: a long message counts the same whether counted or
// remembered, across more distinct messages than the memo holds, and the
// memo never holds more than memoSize of them.
func TestCountMemo(t *testing.T) {
	tk, err := NewTokenizer("gpt-4o")
	if err != nil {
		t.Fatal(err)
	}
	fresh := &Tokenizer{codec: tk.codec} // no memo: the codec's own count
	long := func(i int) string {
		return strings.Repeat(fmt.Sprintf("func f%d(x int) int { return x * %d } // ünïcode\n", i, i), 40)
	}
	for round := range 2 {
		for i := range memoSize + 50 {
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
	if n, _ := tk.memo.Len(); n != memoSize {
		t.Fatalf("the memo holds %d messages, want %d", n, memoSize)
	}
	if _, ok := tk.memo.Get("short"); ok {
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
