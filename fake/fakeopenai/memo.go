package fakeopenai

import (
	"sync"

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
	mu    sync.Mutex
	ids   map[string][]uint
	order []string // oldest first
	bytes int      // of the texts in order
}

func memoize(c tokenizer.Codec) *memoCodec {
	return &memoCodec{Codec: c, ids: map[string][]uint{}}
}

// Encode returns s's token IDs (remembered ones are shared: read only)
// and, for a text it remembers, no token strings.
func (m *memoCodec) Encode(s string) ([]uint, []string, error) {
	if len(s) < memoFrom {
		return m.Codec.Encode(s)
	}
	m.mu.Lock()
	ids, ok := m.ids[s]
	m.mu.Unlock()
	if ok {
		return ids, nil, nil
	}
	ids, _, err := m.Codec.Encode(s)
	if err != nil {
		return nil, nil, err
	}
	if len(s) > memoBytes {
		return ids, nil, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.ids[s]; !ok {
		for len(m.order) > 0 && (len(m.order) >= memoSize || m.bytes+len(s) > memoBytes) {
			old := m.order[0]
			m.order = m.order[1:]
			m.bytes -= len(old)
			delete(m.ids, old)
		}
		m.order = append(m.order, s)
		m.bytes += len(s)
		m.ids[s] = ids
	}
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
