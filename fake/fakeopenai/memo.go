package fakeopenai

import (
	"github.com/prq-dev/prq/internal/fifo"
	"github.com/tiktoken-go/tokenizer"
)

// A client sends the same long texts again and again (every prompt of
// one pull request carries its system text and shared context), and the
// fake tokenises each request's messages to count and to find its
// cached prefixes. memoCodec remembers long texts' tokens so the fake
// does not take the CPU its clients are measured on.
const (
	memoFrom  = 1024     // bytes
	memoSize  = 512      // texts remembered, oldest out first
	memoBytes = 16 << 20 // of the texts remembered
)

// memoCodec is a tokenizer.Codec that remembers long texts' tokens.
type memoCodec struct {
	tokenizer.Codec
	ids *fifo.Memo[[]uint]
}

func memoize(c tokenizer.Codec) *memoCodec {
	return &memoCodec{Codec: c, ids: fifo.New[[]uint](memoSize, memoBytes)}
}

// Encode returns s's token IDs (remembered ones are shared: read only)
// and, for a text it remembers, no token strings.
func (m *memoCodec) Encode(s string) ([]uint, []string, error) {
	if len(s) < memoFrom {
		return m.Codec.Encode(s)
	}
	if ids, ok := m.ids.Get(s); ok {
		return ids, nil, nil
	}
	ids, _, err := m.Codec.Encode(s)
	if err != nil {
		return nil, nil, err
	}
	m.ids.Put(s, ids)
	return ids, nil, nil
}

// Count returns how many tokens s has.
func (m *memoCodec) Count(s string) (int, error) {
	if len(s) < memoFrom {
		return m.Codec.Count(s)
	}
	ids, _, err := m.Encode(s)
	return len(ids), err
}
