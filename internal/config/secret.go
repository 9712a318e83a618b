package config

import (
	"fmt"
	"strings"
)

// MinSecretBytes is the shortest webhook secret or admin token accepted
// outside the demo.
const MinSecretBytes = 16

// placeholders are values people paste from examples, compared after
// lower-casing and dropping everything but letters and digits.
var placeholders = map[string]bool{
	"changeme": true, "changethis": true, "replaceme": true, "secret": true, "mysecret": true, "yoursecret": true,
	"webhooksecret": true, "password": true, "passw0rd": true, "mypassword": true, "test": true, "testing": true,
	"token": true, "admintoken": true, "yourtoken": true, "admin": true, "example": true, "default": true,
	"dummy": true, "todo": true, "fixme": true, "placeholder": true, "letmein": true, "qwerty": true,
	"123456": true, "1234567890": true, "xxx": true, "foo": true, "foobar": true, "prq": true,
}

// WeakSecret says why s is unfit as a secret ("" when it is fine): only
// whitespace, a line break or another control character in it (an HTTP
// header cannot carry one, and a value read from a file often ends with
// one), whitespace around it (headers drop it), a placeholder, one
// character repeated, or shorter than MinSecretBytes. The text never
// contains s.
func WeakSecret(s string) string {
	switch {
	case s != "" && strings.TrimSpace(s) == "":
		return "is only whitespace; generate one: openssl rand -hex 32"
	case strings.ContainsAny(s, "\r\n"):
		return "contains a line break (CR or LF; a value read from a file keeps its last newline); remove it, or generate one: openssl rand -hex 32"
	case strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
		return "contains a control character; generate one: openssl rand -hex 32"
	case strings.TrimSpace(s) != s:
		return "begins or ends with whitespace, which HTTP headers drop; remove it"
	}
	norm := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return -1
	}, s)
	trimmed := strings.TrimSpace(s)
	switch {
	case placeholders[norm] || strings.Contains(norm, "changeme") || strings.Contains(norm, "replaceme") || strings.Contains(norm, "yoursecret"):
		return "is a placeholder value; generate one: openssl rand -hex 32"
	case trimmed != "" && strings.Count(trimmed, trimmed[:1]) == len(trimmed):
		return "is one character repeated; generate one: openssl rand -hex 32"
	case len(s) < MinSecretBytes:
		return fmt.Sprintf("is %d bytes, shorter than %d; generate one: openssl rand -hex 32", len(s), MinSecretBytes)
	}
	return ""
}
