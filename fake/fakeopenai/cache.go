package fakeopenai

import (
	"encoding/binary"
	"hash/fnv"
	"time"
)

// OpenAI's prompt caching, as its guide describes it: automatic for
// prompts of 1,024 tokens or more; a request is served from the cache
// for the longest prefix, in steps of 128 tokens from 1,024, that a
// recent request of the same model sent exactly; cached prefixes live
// 5 to 10 minutes after their last use (the fake keeps 5). Cached
// tokens still count toward the rate limits (they are prompt tokens);
// the usage reports them in prompt_tokens_details.cached_tokens.
const (
	cacheMin     = 1024
	cacheStep    = 128
	cacheLife    = 5 * time.Minute
	cacheEntries = 1 << 18 // a full cache starts over
)

// prefixHashes returns the hashes of the request's prompt prefixes the
// cache may hold: its first 1,024 tokens, then every 128 more (none for
// a prompt under 1,024 tokens, which is not tokenised again).
func (s *Server) prefixHashes(model string, req *chatRequest, prompt int64) []uint64 {
	if prompt < cacheMin {
		return nil
	}
	h := fnv.New64a()
	h.Write([]byte(model))
	var buf [8]byte
	var out []uint64
	n, next := 0, cacheMin
	for _, m := range req.Messages {
		h.Write([]byte{0})
		h.Write([]byte(m.Role))
		toks, _, _ := s.codec.Encode(m.Content)
		for _, t := range toks {
			binary.LittleEndian.PutUint64(buf[:], uint64(t))
			h.Write(buf[:])
			if n++; n == next {
				out = append(out, h.Sum64())
				next += cacheStep
			}
		}
	}
	return out
}

// promptCache returns how many of a prompt's leading tokens the cache
// serves, given its prefixHashes, and records the prefixes as used now.
// Called with s.mu held.
func (s *Server) promptCache(prefixes []uint64, now time.Time) int64 {
	if len(s.prefixes)+len(prefixes) >= cacheEntries {
		s.prefixes = map[uint64]time.Time{}
	}
	cached, hit := int64(0), true // hit: the prefixes so far were all cached
	for i, k := range prefixes {
		if at, ok := s.prefixes[k]; hit && ok && now.Sub(at) < cacheLife {
			cached = int64(cacheMin + i*cacheStep)
		} else {
			hit = false
		}
		s.prefixes[k] = now
	}
	return cached
}
