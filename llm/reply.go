package llm

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
)

var fence = regexp.MustCompile("(?s)```[A-Za-z0-9_-]*[ \t]*\n(.*?)\n[ \t]*```")

// JSONObjects returns the JSON objects a reply holds at its top level, in
// the forms models send them: the whole reply, the contents of code
// fences, or objects standing in prose. Objects inside other objects are
// not returned separately. The caller decides which one, if any, is the
// answer (decode each strictly; a reply with no object or with several
// that decode is unusable).
func JSONObjects(text string) [][]byte {
	t := strings.TrimSpace(text)
	if obj, ok := oneObject(t); ok {
		return [][]byte{obj}
	}
	var out [][]byte
	for _, m := range fence.FindAllStringSubmatch(t, -1) {
		if obj, ok := oneObject(strings.TrimSpace(m[1])); ok {
			out = append(out, obj)
		}
	}
	if len(out) > 0 {
		return out
	}
	// Objects in prose: from each '{', the longest value that parses.
	for i := 0; i < len(t); i++ {
		if t[i] != '{' {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(t[i:]))
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			continue
		}
		out = append(out, bytes.TrimSpace(raw))
		i += int(dec.InputOffset()) - 1
	}
	return out
}

// oneObject reports whether s is exactly one JSON object.
func oneObject(s string) ([]byte, bool) {
	if !strings.HasPrefix(s, "{") || !json.Valid([]byte(s)) {
		return nil, false
	}
	return []byte(s), true
}
