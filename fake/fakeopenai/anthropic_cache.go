package fakeopenai

// The Anthropic mode's prompt caching, as Anthropic's "Prompt caching"
// and "Rate limits" pages (platform.claude.com) describe it:
//   - a prompt is the blocks of tools, system and messages, in that order;
//     cache_control {"type":"ephemeral","ttl":"5m"|"1h"} on a tool, a
//     system block or a message's content block is a breakpoint (ttl
//     defaults to 5m), and a top-level cache_control puts one on the last
//     cacheable block (automatic caching);
//   - at most 4 breakpoints (more: 400 "A maximum of 4 blocks with
//     cache_control may be provided. Found N."), and a 1h breakpoint may
//     not come after a 5m one (400);
//   - a request writes one entry per breakpoint: the prefix through that
//     block, when it holds at least the model's minimum cacheable length
//     (Model.CacheMinTokens; shorter prefixes are silently not cached);
//   - it reads the longest prefix an earlier request wrote, looking back
//     from each breakpoint over at most 20 blocks (the breakpoint first);
//     the fake does not count a run of tool_use or tool_result blocks as
//     one position, as Anthropic does;
//   - an entry lives its TTL from the start of the request that wrote or
//     last read it, and is readable once the writer's response begins (the
//     fake: its admission plus its latency);
//   - usage: cache_read_input_tokens up to the highest hit (A),
//     cache_creation_input_tokens from there to the last breakpoint (C),
//     split into cache_creation.ephemeral_1h_input_tokens up to the
//     highest 1h breakpoint (B) and ephemeral_5m_input_tokens after it,
//     and input_tokens after the last breakpoint: the three sum to the
//     whole prompt;
//   - the input-tokens-per-minute limit counts input_tokens and cache
//     writes but not cache reads, except on the models Anthropic's rate
//     limit tables mark († : Model.CacheReadsCount).
// Caches are kept per API key (the fake's limits are per key, as
// Anthropic's are per organization; caches are per workspace) and model.

import (
	"encoding/binary"
	"fmt"
	"hash"
	"hash/fnv"
	"strings"
	"time"
)

// DefaultCacheMinTokens is the minimum cacheable prompt length of a model
// the cacheMinimums table does not name: Sonnet's and most models'.
const DefaultCacheMinTokens = 1024

// cacheMinimums are Anthropic's minimum cacheable prompt lengths that
// differ from DefaultCacheMinTokens ("Prompt caching", Cache limitations),
// by model-name prefix.
var cacheMinimums = []struct {
	prefix string
	tokens int64
}{
	{"claude-opus-5", 512},
	{"claude-opus-4-7", 2048},
	{"claude-opus-4-6", 4096},
	{"claude-opus-4-5", 4096},
	{"claude-haiku-4-5", 4096},
	{"claude-3-5-haiku", 2048},
	{"claude-3-haiku", 2048},
}

// cacheReadsCounted are the models whose input limit counts cache reads
// (marked † in Anthropic's "Rate limits" tables), by model-name prefix.
var cacheReadsCounted = []string{"claude-3-haiku", "claude-3-5-haiku", "claude-3-opus"}

// cacheMinOf is a model's minimum cacheable prompt length by its name.
func cacheMinOf(name string) int64 {
	for _, c := range cacheMinimums {
		if strings.HasPrefix(name, c.prefix) {
			return c.tokens
		}
	}
	return DefaultCacheMinTokens
}

// readsCountOf reports whether a model's input limit counts cache reads,
// by its name.
func readsCountOf(name string) bool {
	for _, p := range cacheReadsCounted {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// The lifetimes cache_control asks for, and how far back a breakpoint
// looks for an earlier request's entry.
const (
	cacheTTLShort  = 5 * time.Minute
	cacheTTLLong   = time.Hour
	cacheLookback  = 20
	maxBreakpoints = 4
)

// cacheControl is a block's (or the request's) cache_control.
type cacheControl struct {
	Type string `json:"type"`
	TTL  string `json:"ttl"`
}

// lifetime checks a cache_control as Anthropic's schema does and returns
// the TTL it asks for; path names it in the error.
func (c *cacheControl) lifetime(path string) (time.Duration, string) {
	if c.Type != "ephemeral" {
		return 0, path + ".cache_control.type: Input should be 'ephemeral'"
	}
	switch c.TTL {
	case "", "5m":
		return cacheTTLShort, ""
	case "1h":
		return cacheTTLLong, ""
	}
	return 0, path + ".cache_control.ttl: Input should be '5m' or '1h'"
}

// promptBlock is one position of a Messages request's prompt.
type promptBlock struct {
	path string // where it is in the request ("system.0", "messages.2.content.1")
	// tokens is what the block adds to the prompt as usage counts it (a
	// message's first block carries the message's framing); chars and
	// extra what the input limit's estimate charges for it:
	// ceil(chars/4) over the uncached blocks, plus extra (the tool-use
	// system prompt, in tokens).
	tokens int64
	chars  int
	extra  int64
	// hash identifies the prompt through this block (with the API key and
	// the model): the cache's key.
	hash uint64
	// ttl is the lifetime its cache_control asks for; 0: no breakpoint.
	ttl time.Duration
	// cacheable: automatic caching may put its breakpoint here (not a
	// thinking block, not empty text).
	cacheable bool
}

// promptHasher builds a prompt's blocks and their prefix hashes.
type promptHasher struct {
	h      hash.Hash64
	blocks []promptBlock
}

func newPromptHasher(key, model string) *promptHasher {
	p := &promptHasher{h: fnv.New64a()}
	p.write(key, model)
	return p
}

// write adds parts to the hash, each with its length so parts cannot run
// into each other.
func (p *promptHasher) write(parts ...string) {
	var n [8]byte
	for _, s := range parts {
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		p.h.Write(n[:])
		p.h.Write([]byte(s))
	}
}

// add appends a block whose content is parts.
func (p *promptHasher) add(b promptBlock, parts ...string) {
	p.write(parts...)
	b.hash = p.h.Sum64()
	p.blocks = append(p.blocks, b)
}

// breakpoints checks a prompt's breakpoints as Anthropic does: at most 4,
// no 1h after a 5m. auto is the request's top-level cache_control
// (automatic caching), placed on the last cacheable block.
func breakpoints(blocks []promptBlock, auto *cacheControl) string {
	if auto != nil {
		ttl, msg := auto.lifetime("cache_control")
		if msg != "" {
			return strings.TrimPrefix(msg, "cache_control.")
		}
		for i := len(blocks) - 1; i >= 0; i-- {
			if !blocks[i].cacheable {
				continue
			}
			switch blocks[i].ttl {
			case 0:
				blocks[i].ttl = ttl
			case ttl:
			default:
				return fmt.Sprintf("cache_control: %s already has a cache_control with a different ttl", blocks[i].path)
			}
			break
		}
	}
	n, short := 0, false
	for _, b := range blocks {
		switch b.ttl {
		case 0:
			continue
		case cacheTTLShort:
			short = true
		case cacheTTLLong:
			if short {
				return "A ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. Note that blocks are processed in the following order: `tools`, `system`, `messages`."
			}
		}
		n++
	}
	if n > maxBreakpoints {
		return fmt.Sprintf("A maximum of %d blocks with cache_control may be provided. Found %d.", maxBreakpoints, n)
	}
	return ""
}

// cacheEntry is a cached prefix: readable from from (its writer's
// response began) until expires.
type cacheEntry struct {
	from, expires time.Time
	ttl           time.Duration
}

func (e cacheEntry) live(now time.Time) bool { return !now.Before(e.from) && now.Before(e.expires) }

// msgUsage is a request's input as Anthropic's usage reports it.
type msgUsage struct {
	input, read, write5m, write1h int64
}

// json is the usage object of a reply with output tokens.
func (u msgUsage) json(output int64) map[string]any {
	return map[string]any{"input_tokens": u.input, "output_tokens": output,
		"cache_creation_input_tokens": u.write5m + u.write1h, "cache_read_input_tokens": u.read,
		"cache_creation": map[string]any{"ephemeral_5m_input_tokens": u.write5m, "ephemeral_1h_input_tokens": u.write1h}}
}

// promptCache is what the cache does for one request: the block its
// read ends at (-1: none), the breakpoints it writes, and its usage.
type promptCache struct {
	hit    int
	writes []int
	usage  msgUsage
}

// lookupCache finds the longest cached prefix a request reads and the
// entries it writes, without changing the cache (a refused request
// changes nothing). Called with s.mu held.
func (s *Server) lookupCache(blocks []promptBlock, minTokens int64, now time.Time) promptCache {
	pc := promptCache{hit: -1}
	for i, b := range blocks {
		if b.ttl == 0 {
			continue
		}
		for j := i; j >= 0 && j > i-cacheLookback; j-- {
			if e, ok := s.msgCache[blocks[j].hash]; ok && e.live(now) {
				pc.hit = max(pc.hit, j)
				break
			}
		}
	}
	var total, read, long, last int64
	for i, b := range blocks {
		total += b.tokens
		if i == pc.hit {
			read = total
		}
		if b.ttl == 0 || total < minTokens {
			continue
		}
		pc.writes = append(pc.writes, i)
		if i > pc.hit {
			last = total
			if b.ttl == cacheTTLLong {
				long = total
			}
		}
	}
	// each breakpoint written after the read sets last: read ≤ long ≤ last
	long, last = max(long, read), max(last, read)
	pc.usage = msgUsage{read: read, write1h: long - read, write5m: last - long, input: total - last}
	return pc
}

// charge is what the input limit counts of a request: ceil(chars/4) and
// the extra tokens of the blocks it does not read from the cache (all of
// them on a model whose limit counts cache reads).
func charge(blocks []promptBlock, pc promptCache, readsCount bool) int64 {
	from := pc.hit + 1
	if readsCount {
		from = 0
	}
	chars, extra := 0, int64(0)
	for _, b := range blocks[from:] {
		chars += b.chars
		extra += b.extra
	}
	return int64(chars+3)/4 + extra
}

// storeCache writes a request's entries and refreshes the one it read,
// each for its TTL from now (the request's start); new entries are
// readable from ready (when its response begins). Called with s.mu held.
func (s *Server) storeCache(blocks []promptBlock, pc promptCache, now, ready time.Time) {
	if len(s.msgCache)+len(pc.writes) >= cacheEntries {
		for k, e := range s.msgCache {
			if !now.Before(e.expires) {
				delete(s.msgCache, k)
			}
		}
		if len(s.msgCache)+len(pc.writes) >= cacheEntries {
			s.msgCache = map[uint64]cacheEntry{}
		}
	}
	if pc.hit >= 0 {
		k := blocks[pc.hit].hash
		e := s.msgCache[k]
		e.expires = laterOf(e.expires, now.Add(e.ttl))
		s.msgCache[k] = e
	}
	for _, i := range pc.writes {
		k, ttl := blocks[i].hash, blocks[i].ttl
		e, ok := s.msgCache[k]
		if !ok || !now.Before(e.expires) {
			e = cacheEntry{from: ready}
		}
		e.ttl = max(e.ttl, ttl)
		e.expires = laterOf(e.expires, now.Add(ttl))
		s.msgCache[k] = e
	}
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
