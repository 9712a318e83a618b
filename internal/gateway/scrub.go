package gateway

import (
	"bytes"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strconv"
)

// An upstream's error text goes to the client (its status, type and
// message are what the client needs), but a self-hosted OpenAI-compatible
// server or a proxy may echo the request, credentials included. Every
// error reply is scrubbed before anything reads it: each configured
// upstream key, then whatever looks like a credential, becomes
// [redacted].

const redacted = "[redacted]"

// credentialLike matches what looks like a credential: a bearer token, an
// OpenAI-style (sk-…) or Anthropic-style (sk-ant-…) key, and the value of
// an api-key, x-api-key, authorization or key field or parameter.
var credentialLike = []*regexp.Regexp{
	regexp.MustCompile(`(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{6,}`),
	regexp.MustCompile(`(?i)(basic\s+)[A-Za-z0-9+/=]{6,}`),
	regexp.MustCompile(`()\bsk-[A-Za-z0-9._-]{6,}`),
	regexp.MustCompile(`(?i)((?:x-)?api[-_]?key|authorization|access[-_]?token|secret|[?&]key)(\\?["']?\s*[:=]\s*\\?["']?)[^\s"'\\,;&}]{6,}`),
}

// upstreamKeys are every configured upstream credential, longest first
// (a key that contains another is removed whole).
func (g *Gateway) upstreamKeys() [][]byte {
	seen := map[string]bool{}
	var keys [][]byte
	for _, m := range g.cfg.Models {
		for _, k := range m.Provider.Keys {
			if len(k) >= 4 && !seen[k] {
				seen[k] = true
				keys = append(keys, []byte(k))
			}
		}
	}
	sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
	return keys
}

// scrub removes the upstream keys and anything that looks like a
// credential from b.
func (g *Gateway) scrub(b []byte) []byte {
	for _, k := range g.upstreamKeys() {
		b = bytes.ReplaceAll(b, k, []byte(redacted))
	}
	for i, re := range credentialLike {
		repl := "${1}" + redacted
		if i == len(credentialLike)-1 {
			repl = "${1}${2}" + redacted
		}
		b = re.ReplaceAll(b, []byte(repl))
	}
	return b
}

// maxErrorBody bounds the error reply kept from a provider.
const maxErrorBody = 1 << 20

// scrubError replaces an error reply's body (status 400 and up) with its
// scrubbed text, cut to maxErrorBody; the status and headers stay.
func (g *Gateway) scrubError(resp *http.Response) {
	if resp.StatusCode < 400 {
		return
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	body = g.scrub(body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
}
