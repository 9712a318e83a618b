package gateway

import (
	"fmt"

	"github.com/prq-dev/prq/ratelimit"
)

// A text is counted in pieces, so that counting can stop as soon as the
// count passes what the key could ever pay for: an 8 MB prompt under a
// key with 1,000 tokens left costs the first few kilobytes of counting,
// not seconds.
//
// The pieces are cut only where the encodings' pre-tokenizer (the split
// regular expression of o200k_base and cl100k_base, which BPE never
// merges across) always ends a piece, whatever comes before, so the sum
// of the pieces' counts is the count of the whole, exactly:
//
//   - after a newline followed by an ASCII character that is neither
//     whitespace nor '/' (a punctuation piece may take newlines and
//     slashes after it; no other piece runs past a newline);
//   - after an ASCII digit followed by an ASCII non-digit (digits form
//     pieces of their own, of up to three);
//   - before a space that follows an ASCII letter (a word's piece ends
//     at its last letter; the space begins the next word's).
//
// The tokenizer's cost is linear up to some 64 KiB and grows faster past
// it, so a stretch longer than maxStretch with no cut in it (a run of
// whitespace, one endless word) is not tokenized: it counts one token
// per byte, more than it can be (every token is at least a byte), and
// the reservation errs high, never low. TestPieceCountsAddUp checks the
// cuts against the tokenizer.

const (
	// countChunk is how much text is counted at once.
	countChunk = 16 << 10
	// maxStretch is the longest text tokenized without a cut.
	maxStretch = 64 << 10
)

// counter counts texts exactly as ratelimit.Tokenizer.CountMessages
// does, with a budget.
type counter struct {
	tk *ratelimit.Tokenizer
	// CountMessages' framing, measured: reply priming, and per message
	reply, perMessage int64
}

func newCounter(tk *ratelimit.Tokenizer) (*counter, error) {
	none, err := tk.CountMessages()
	if err != nil {
		return nil, err
	}
	one, err := tk.CountMessages("")
	if err != nil {
		return nil, err
	}
	return &counter{tk: tk, reply: none, perMessage: one - none}, nil
}

// raw counts one text without framing.
func (c *counter) raw(s string) (int64, error) {
	n, err := c.tk.CountMessages(s)
	return n - c.reply - c.perMessage, err
}

// text counts s, stopping once the count passes budget (the count
// returned is then more than budget, and less than the whole).
func (c *counter) text(s string, budget int64) (int64, error) {
	var n int64
	for pos := 0; pos < len(s) && n <= budget; {
		if len(s)-pos <= countChunk {
			k, err := c.raw(s[pos:])
			return n + k, err
		}
		end := lastCut(s, pos, pos+countChunk)
		if end < 0 {
			end = nextCut(s, pos+countChunk)
			if end-pos > maxStretch {
				n += int64(end - pos) // at most a token per byte
				pos = end
				continue
			}
		}
		k, err := c.raw(s[pos:end])
		if err != nil {
			return 0, err
		}
		n, pos = n+k, end
	}
	return n, nil
}

// messages counts texts as CountMessages does (one message each), with
// a budget as text.
func (c *counter) messages(texts []string, budget int64) (int64, error) {
	n := c.reply
	for _, t := range texts {
		if n > budget {
			break
		}
		k, err := c.text(t, budget-n-c.perMessage)
		if err != nil {
			return 0, fmt.Errorf("gateway: count: %w", err)
		}
		n += k + c.perMessage
	}
	return n, nil
}

// isCut reports whether a piece always ends before s[p] (see above).
func isCut(s string, p int) bool {
	if p <= 0 || p >= len(s) {
		return true
	}
	prev, next := s[p-1], s[p]
	switch {
	case prev == '\n':
		return next < 0x80 && next != '/' && !asciiSpace(next)
	case isDigit(prev):
		return next < 0x80 && !isDigit(next)
	case next == ' ':
		return prev >= 'a' && prev <= 'z' || prev >= 'A' && prev <= 'Z'
	}
	return false
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// asciiSpace: the ASCII characters of the regular expressions' \s.
func asciiSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// lastCut is the last cut in (from, to], or -1.
func lastCut(s string, from, to int) int {
	for p := min(to, len(s)); p > from; p-- {
		if isCut(s, p) {
			return p
		}
	}
	return -1
}

// nextCut is the first cut at or after from (len(s) at the latest).
func nextCut(s string, from int) int {
	for p := from; p < len(s); p++ {
		if isCut(s, p) {
			return p
		}
	}
	return len(s)
}
