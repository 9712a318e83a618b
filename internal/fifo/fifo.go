// Package fifo is a bounded memo keyed by strings: the most recent
// entries, up to a count and a total of their keys' bytes, oldest out
// first. It is safe for concurrent use.
package fifo

import "sync"

// Memo remembers values by key, at most Max entries and Bytes of keys;
// a key longer than Bytes is not kept. The zero value is not usable:
// call New.
type Memo[V any] struct {
	max, maxBytes int
	mu            sync.Mutex
	m             map[string]V
	order         []string // oldest first
	bytes         int      // of the keys in order
}

// New returns a memo of at most max entries and maxBytes of keys.
func New[V any](max, maxBytes int) *Memo[V] {
	return &Memo[V]{max: max, maxBytes: maxBytes, m: map[string]V{}}
}

// Get returns key's value, if remembered.
func (c *Memo[V]) Get(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[key]
	return v, ok
}

// Put remembers key's value (a key remembered already keeps its first),
// dropping the oldest entries to make room.
func (c *Memo[V]) Put(key string, v V) {
	if len(key) > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; ok {
		return
	}
	for len(c.order) > 0 && (len(c.order) >= c.max || c.bytes+len(key) > c.maxBytes) {
		old := c.order[0]
		c.order = c.order[1:]
		c.bytes -= len(old)
		delete(c.m, old)
	}
	c.order = append(c.order, key)
	c.bytes += len(key)
	c.m[key] = v
}

// Len returns how many entries it holds and their keys' bytes.
func (c *Memo[V]) Len() (entries, bytes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m), c.bytes
}
