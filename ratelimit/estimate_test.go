package ratelimit

import (
	"fmt"
	"strconv"
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
	tk.memo.mu.Lock()
	if n := len(tk.memo.count); n != memoSize || len(tk.memo.order) != memoSize {
		t.Fatalf("the memo holds %d messages (%d in order), want %d", n, len(tk.memo.order), memoSize)
	}
	if _, ok := tk.memo.count["short"]; ok {
		t.Fatal("a short message was remembered")
	}
	tk.memo.mu.Unlock()
	// large messages: the memo keeps to its bytes
	big := strings.Repeat("x", memoBytes/3+1)
	for i := range 5 {
		tk.memo.put(big+strconv.Itoa(i), i) // counting them is not the point: slow
	}
	tk.memo.put(strings.Repeat("y", memoBytes+1), 1) // over the whole memo: not kept
	tk.memo.mu.Lock()
	defer tk.memo.mu.Unlock()
	total := 0
	for _, s := range tk.memo.order {
		total += len(s)
	}
	if total != tk.memo.bytes || total > memoBytes || len(tk.memo.count) != len(tk.memo.order) || len(tk.memo.order) != 2 {
		t.Fatalf("the memo holds %d messages of %d bytes (counted %d), want 2 within %d", len(tk.memo.order), total, tk.memo.bytes, memoBytes)
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
