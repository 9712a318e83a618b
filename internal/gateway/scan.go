package gateway

import (
	"encoding/json"
	"fmt"
)

// A body is scanned once, byte by byte and without building anything,
// before it is decoded: the scan checks its syntax and the limits below,
// and bounds from below the tokens it will be counted as. Decoding a body
// into generic JSON costs some ten times its size in memory, and counting
// it a few seconds per megabyte; the scan costs neither, so a body that
// breaks a limit, or whose least count is more than the key could ever
// pay for, is refused for the price of reading it.
//
// The lower bound is the larger of two: every token of the encodings the
// gateway counts with is at most maxTokenBytes bytes, so a text of b
// bytes is at least b/maxTokenBytes tokens (the scan adds up the bytes
// of every string and number under the fields that are counted, an
// escape as one byte, the least it decodes to); and every cut the
// counter knows (count.go) ends a piece, so a text is at least as many
// tokens as it has cuts (the scan counts those a string's unescaped
// bytes show: after a digit followed by another ASCII character, before
// a space that follows a letter; they are cuts whether the string is
// counted as text or as JSON). A number under a token-ids field (the
// embeddings' token arrays) is the one token it is.

// maxTokenBytes is the longest token of o200k_base and cl100k_base (a
// run of 128 spaces; TestMaxTokenBytes checks it).
const maxTokenBytes = 128

// scanLimits bound a body's shape.
type scanLimits struct {
	depth  int // nesting of arrays and objects
	items  int // elements of one array, members of one object
	values int // values in the whole body
	scalar int // bytes of an uncounted top-level field's value
}

// scanPolicy says how a client API's top-level fields are counted.
type scanPolicy struct {
	// uncounted fields cost no input tokens (numbers, booleans, short
	// enums): their values are bounded by scanLimits.scalar instead.
	uncounted map[string]bool
	// ids fields hold token arrays: each number is one token.
	ids map[string]bool
}

// scanned is what the scan learned of a body.
type scanned struct {
	model   string // the top-level "model", when it is a plain string
	counted int64  // bytes of strings and numbers under counted fields
	cuts    int64  // cuts in those strings
	ids     int64  // numbers under token-ids fields
}

// leastTokens is the fewest tokens the body can be counted as.
func (s scanned) leastTokens() int64 {
	return max((s.counted+maxTokenBytes-1)/maxTokenBytes, s.cuts) + s.ids
}

// limitError is a body past one of the scan's limits (400).
type limitError struct{ msg string }

func (e *limitError) Error() string { return e.msg }

// scanBody scans a body that must be a JSON object (see above). A
// *limitError is a body past a limit; any other error is bad JSON.
func scanBody(body []byte, lim scanLimits, pol scanPolicy) (scanned, error) {
	s := scanner{b: body, lim: lim, pol: pol}
	s.skipSpace()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return scanned{}, fmt.Errorf("a JSON object is expected")
	}
	if err := s.value(0, topLevel); err != nil {
		return scanned{}, err
	}
	s.skipSpace()
	if s.i != len(s.b) {
		return scanned{}, fmt.Errorf("data after the JSON object at byte %d", s.i)
	}
	return s.out, nil
}

// where a value sits: the top-level object, one of its fields' values
// (counted or not), or deeper under one.
type region int

const (
	topLevel region = iota
	counted
	uncounted
	idsField
	quiet // under a counted field, but not counted itself
)

type scanner struct {
	b      []byte
	i      int
	lim    scanLimits
	pol    scanPolicy
	values int
	out    scanned
}

func (s *scanner) skipSpace() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) syntax(what string) error {
	if s.i >= len(s.b) {
		return fmt.Errorf("unexpected end of JSON (%s)", what)
	}
	return fmt.Errorf("invalid JSON at byte %d: %s", s.i, what)
}

// value scans one value at depth (the containers around it) in region.
func (s *scanner) value(depth int, in region) error {
	s.values++
	if s.values > s.lim.values {
		return &limitError{fmt.Sprintf("The request body holds more than %d JSON values.", s.lim.values)}
	}
	s.skipSpace()
	if s.i >= len(s.b) {
		return s.syntax("a value")
	}
	switch c := s.b[s.i]; {
	case c == '{' || c == '[':
		if depth >= s.lim.depth {
			return &limitError{fmt.Sprintf("The request body nests arrays and objects more than %d deep.", s.lim.depth)}
		}
		if c == '{' {
			return s.object(depth+1, in)
		}
		return s.array(depth+1, in)
	case c == '"':
		start := s.i
		_, n, err := s.str()
		if err == nil && (in == counted || in == idsField) { // an ids field's texts are counted
			s.out.counted += n
			s.out.cuts += stringCuts(s.b[start+1 : s.i-1])
		}
		return err
	case c == '-' || c >= '0' && c <= '9':
		start := s.i
		if err := s.number(); err != nil {
			return err
		}
		switch in {
		case counted:
			s.out.counted += int64(s.i - start)
		case idsField:
			s.out.ids++
		}
		return nil
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
				s.i += len(lit)
				if in == counted {
					s.out.counted += int64(len(lit))
				}
				return nil
			}
		}
		return s.syntax("a value")
	}
}

func (s *scanner) object(depth int, in region) error {
	s.i++ // {
	members := 0
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		s.skipSpace()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return s.syntax("a member name")
		}
		start := s.i
		escaped, _, err := s.str()
		if err != nil {
			return err
		}
		if members++; members > s.lim.items {
			return &limitError{fmt.Sprintf("An object of the request body has more than %d members.", s.lim.items)}
		}
		field := in
		if in == topLevel {
			name := string(s.b[start+1 : s.i-1])
			if escaped {
				if json.Unmarshal(s.b[start:s.i], &name) != nil {
					return s.syntax("a member name")
				}
			}
			switch {
			case s.pol.uncounted[name]:
				field = uncounted
			case s.pol.ids[name]:
				field = idsField
			default:
				field = counted
			}
			if name == "model" {
				s.out.model = "" // the last one counts, as when decoded
			}
			s.skipSpace()
			if s.i >= len(s.b) || s.b[s.i] != ':' {
				return s.syntax("':' after a member name")
			}
			s.i++
			s.skipSpace()
			vstart := s.i
			if err := s.value(depth, field); err != nil {
				return err
			}
			if field == uncounted && s.i-vstart > s.lim.scalar {
				return &requestError{param: name, msg: fmt.Sprintf("'%s' is %d bytes long; the gateway takes at most %d for it.", name, s.i-vstart, s.lim.scalar)}
			}
			if name == "model" && s.b[vstart] == '"' {
				var m string
				if json.Unmarshal(s.b[vstart:s.i], &m) == nil {
					s.out.model = m
				}
			}
		} else {
			// a name is not counted (a JSON-rendered field's are, but a
			// message's "content" is not), nor a role's or a part's type
			if in == counted {
				if name := s.b[start+1 : s.i-1]; string(name) == "role" || string(name) == "type" {
					field = quiet
				}
			}
			s.skipSpace()
			if s.i >= len(s.b) || s.b[s.i] != ':' {
				return s.syntax("':' after a member name")
			}
			s.i++
			if err := s.value(depth, field); err != nil {
				return err
			}
		}
		s.skipSpace()
		if s.i >= len(s.b) {
			return s.syntax("',' or '}'")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.syntax("',' or '}'")
		}
	}
}

func (s *scanner) array(depth int, in region) error {
	s.i++ // [
	items := 0
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return nil
	}
	for {
		if items++; items > s.lim.items {
			return &limitError{fmt.Sprintf("An array of the request body has more than %d elements.", s.lim.items)}
		}
		if err := s.value(depth, in); err != nil {
			return err
		}
		s.skipSpace()
		if s.i >= len(s.b) {
			return s.syntax("',' or ']'")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.syntax("',' or ']'")
		}
	}
}

// str scans a string at s.i ('"'): whether it holds escapes, and the
// fewest bytes it decodes to.
func (s *scanner) str() (escaped bool, n int64, err error) {
	s.i++ // "
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return escaped, n, nil
		case c == '\\':
			escaped = true
			if s.i+1 >= len(s.b) {
				return false, 0, s.syntax("an escape")
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.b) || !isHex(s.b[s.i+2]) || !isHex(s.b[s.i+3]) || !isHex(s.b[s.i+4]) || !isHex(s.b[s.i+5]) {
					return false, 0, s.syntax("a \\u escape")
				}
				s.i += 6
			default:
				return false, 0, s.syntax("an escape")
			}
			n++
		case c < 0x20:
			return false, 0, s.syntax("a control character in a string")
		default:
			s.i++
			n++
		}
	}
	return false, 0, s.syntax("the end of a string")
}

// stringCuts counts the cuts between a raw string's unescaped bytes
// that are cuts in its text and in its JSON alike (see above).
func stringCuts(raw []byte) int64 {
	var n int64
	prev := byte(0) // 0: the previous character was escaped, or none
	for i := 0; i < len(raw); {
		c := raw[i]
		if c == '\\' {
			prev = 0
			if i+1 < len(raw) && raw[i+1] == 'u' {
				i += 6
			} else {
				i += 2
			}
			continue
		}
		switch {
		case prev == 0:
		case isDigit(prev) && c >= 0x20 && c < 0x7f && !isDigit(c):
			n++
		case c == ' ' && (prev >= 'a' && prev <= 'z' || prev >= 'A' && prev <= 'Z'):
			n++
		}
		prev = c
		i++
	}
	return n
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// number scans a JSON number at s.i.
func (s *scanner) number() error {
	if s.b[s.i] == '-' {
		s.i++
	}
	digits := func() int {
		start := s.i
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
		}
		return s.i - start
	}
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
	} else if digits() == 0 {
		return s.syntax("a number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return s.syntax("a number's fraction")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return s.syntax("a number's exponent")
		}
	}
	return nil
}
