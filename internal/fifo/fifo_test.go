package fifo

import (
	"strconv"
	"strings"
	"testing"
)

// TestMemoBounds: the memo keeps the newest entries within its count and
// its bytes, oldest out first, and never keeps a key over its bytes.
func TestMemoBounds(t *testing.T) {
	m := New[int](3, 100)
	for i := range 5 {
		m.Put("k"+strconv.Itoa(i), i)
	}
	if n, _ := m.Len(); n != 3 {
		t.Fatalf("%d entries, want 3", n)
	}
	if _, ok := m.Get("k1"); ok {
		t.Fatal("k1 kept past the count")
	}
	if v, ok := m.Get("k4"); !ok || v != 4 {
		t.Fatalf("k4 = %d, %v", v, ok)
	}
	m.Put(strings.Repeat("x", 60), 1)
	m.Put(strings.Repeat("y", 60), 2) // both cannot fit 100 bytes
	if _, ok := m.Get(strings.Repeat("x", 60)); ok {
		t.Fatal("the older long key kept past the bytes")
	}
	if n, b := m.Len(); b > 100 || n != 1 {
		t.Fatalf("%d entries of %d bytes, want 1 within 100", n, b)
	}
	m.Put(strings.Repeat("z", 101), 3)
	if _, ok := m.Get(strings.Repeat("z", 101)); ok {
		t.Fatal("a key over the bytes was kept")
	}
}
