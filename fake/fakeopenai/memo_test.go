package fakeopenai

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tiktoken-go/tokenizer"
)

// TestMemoCodec: long texts encode and count the same remembered or
// not, across more texts than the memo holds, and it holds at most
// memoSize of them.
func TestMemoCodec(t *testing.T) {
	c, err := tokenizer.Get(tokenizer.O200kBase)
	if err != nil {
		t.Fatal(err)
	}
	m := memoize(c)
	for round := range 2 {
		for i := range memoSize + 20 {
			s := strings.Repeat(fmt.Sprintf("line %d: naïve café, x := y*%d\n", i, i), 60)
			got, _, err := m.Encode(s)
			if err != nil {
				t.Fatal(err)
			}
			want, _, _ := c.Encode(s)
			n, _ := m.Count(s)
			if !slices.Equal(got, want) || n != len(want) {
				t.Fatalf("round %d, text %d: %d ids (count %d), want %d", round, i, len(got), n, len(want))
			}
		}
	}
	if n, _ := m.ids.Len(); n != memoSize {
		t.Fatalf("the memo holds %d texts, want %d", n, memoSize)
	}
	if n, _ := m.Count("short"); n != 1 {
		t.Fatalf("short text: count %d", n)
	}
	if k, _ := m.ids.Len(); k != memoSize {
		t.Fatalf("a short text changed the memo: %d texts", k)
	}
}
