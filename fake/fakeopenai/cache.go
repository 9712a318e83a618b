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

// promptCache returns how many of the request's leading prompt tokens
// the cache serves, and records its prefixes as used now. Called with
// s.mu held.
func (s *Server) promptCache(model string, req *chatRequest, prompt int64, now time.Time) int64 {
	if prompt < cacheMin {
		return 0
	}
	if len(s.prefixes) >= cacheEntries {
		s.prefixes = map[uint64]time.Time{}
	}
	h := fnv.New64a()
	h.Write([]byte(model))
	var buf [8]byte
	n, next, cached := 0, cacheMin, int64(0)
	hit := true // the prefixes so far were all cached
	for _, m := range req.Messages {
		h.Write([]byte{0})
		h.Write([]byte(m.Role))
		toks, _, _ := s.codec.Encode(m.Content)
		for _, t := range toks {
			binary.LittleEndian.PutUint64(buf[:], uint64(t))
			h.Write(buf[:])
			if n++; n < next {
				continue
			}
			k := h.Sum64()
			if at, ok := s.prefixes[k]; hit && ok && now.Sub(at) < cacheLife {
				cached = int64(n)
			} else {
				hit = false
			}
			s.prefixes[k] = now
			next += cacheStep
		}
	}
	return cached
}
