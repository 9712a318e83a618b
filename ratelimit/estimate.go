package ratelimit

import (
	"crypto/sha256"
	"fmt"
	"math"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prq-dev/prq/internal/fifo"
	"github.com/tiktoken-go/tokenizer"
)

// DefaultMaxOutput is the output allowance assumed for a request that sets
// no max output tokens, in estimates and in the fake provider.
const DefaultMaxOutput = 4096

// AnthropicToolUseTokens is the input Anthropic adds to a request that
// offers tools: a system prompt of its own, 346 tokens with tool_choice
// auto or none and 313 with any or tool for current Claude models
// (Anthropic's "Tool use" pricing table; older models up to 346 too).
// Its input-token limit counts it, so an estimate of a call that forces a
// tool (prq's structured reviews) adds the larger figure.
const AnthropicToolUseTokens = 346

// OutputAllowance is the output a request may take: its max output
// tokens, DefaultMaxOutput when it sets none. It is the output part of
// EstimateOpenAI's estimate.
func OutputAllowance(maxOutput int64) int64 {
	if maxOutput <= 0 {
		return DefaultMaxOutput
	}
	return maxOutput
}

// EstimateOpenAI mirrors OpenAI's admission rule: ceil(characters of all
// messages / 4) plus the request's max output tokens.
func EstimateOpenAI(messages []string, maxOutput int64) int64 {
	chars := 0
	for _, m := range messages {
		chars += utf8.RuneCountInString(m)
	}
	if maxOutput <= 0 {
		maxOutput = DefaultMaxOutput
	}
	return int64(math.Ceil(float64(chars)/4)) + maxOutput
}

// Tokenizer counts tokens offline, exactly as the provider will.
type Tokenizer struct {
	codec tokenizer.Codec
	memo  *fifo.Memo[int]
}

var (
	codecs   = map[tokenizer.Encoding]tokenizer.Codec{}
	memos    = map[tokenizer.Encoding]*fifo.Memo[int]{}
	codecsMu sync.Mutex
)

// Messages recur: every prompt of one head carries the same system text
// and shared context (thousands of tokens), the planner counts a file's
// prompt while it splits and submits it, and each file job counts it
// again when it runs (counting costs about 0.2 ms a KB; hashing, 1 µs).
// A message of memoFrom bytes or more is counted once and remembered by
// its SHA-256: the most recent memoSize messages (32 bytes of key each),
// enough for the prompts of the jobs a busy process holds between their
// plan and their run.
const (
	memoFrom = 256
	memoSize = 8192
)

// NewTokenizer returns the tokenizer of a model; models tiktoken does not
// know use o200k_base, the encoding of current OpenAI models (OpenAI's
// embedding models count with cl100k_base).
func NewTokenizer(model string) (*Tokenizer, error) {
	enc := tokenizer.O200kBase
	if strings.HasPrefix(model, "gpt-4-") || model == "gpt-4" || strings.HasPrefix(model, "gpt-3.5") || strings.HasPrefix(model, "text-embedding-") {
		enc = tokenizer.Cl100kBase
	}
	codecsMu.Lock()
	defer codecsMu.Unlock()
	c, ok := codecs[enc]
	if !ok {
		var err error
		if c, err = tokenizer.Get(enc); err != nil {
			return nil, fmt.Errorf("ratelimit: tokenizer %s: %w", enc, err)
		}
		codecs[enc] = c
		memos[enc] = fifo.New[int](memoSize, memoSize*sha256.Size)
	}
	return &Tokenizer{codec: c, memo: memos[enc]}, nil
}

// Per OpenAI's cookbook: every message costs 3 tokens of framing, every
// reply is primed with 3 more.
const (
	tokensPerMessage = 3
	tokensPerReply   = 3
)

// CountMessages returns the prompt tokens of chat messages (contents).
func (t *Tokenizer) CountMessages(contents ...string) (int64, error) {
	n := int64(tokensPerReply)
	for _, c := range contents {
		k, err := t.count(c)
		if err != nil {
			return 0, err
		}
		n += int64(k) + tokensPerMessage + 1 // +1 for the role
	}
	return n, nil
}

// count is the tokens of one text, remembered when it is long.
func (t *Tokenizer) count(s string) (int, error) {
	var key string
	if len(s) >= memoFrom && t.memo != nil {
		sum := sha256.Sum256([]byte(s))
		key = string(sum[:])
		if k, ok := t.memo.Get(key); ok {
			return k, nil
		}
	}
	k, err := t.codec.Count(s)
	if err != nil {
		return 0, fmt.Errorf("ratelimit: count tokens: %w", err)
	}
	if key != "" {
		t.memo.Put(key, k)
	}
	return k, nil
}
