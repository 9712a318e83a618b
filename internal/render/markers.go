package render

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// Markers makes the hidden markers by which prq finds its own comments,
// reviews and replies again (so a retried job edits instead of posting
// twice). Each carries a tag, an HMAC of what it marks under a key derived
// from the webhook secret: a marker copied from another pull request,
// head or installation, or typed by hand, does not match. Ownership (only
// the App's bot account's writes count) is checked separately, by ghapp.
type Markers struct{ key []byte }

// NewMarkers derives the markers' key from secret (the webhook secret).
func NewMarkers(secret []byte) Markers {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("prq markers v1"))
	return Markers{key: mac.Sum(nil)}
}

func (m Markers) tag(parts ...string) string {
	mac := hmac.New(sha256.New, m.key)
	for _, p := range parts {
		mac.Write([]byte(p))
		mac.Write([]byte{0})
	}
	return hex.EncodeToString(mac.Sum(nil))[:20]
}

// Summary marks part (1-based) of a pull request's summary comment; pr
// names the pull request with its installation.
func (m Markers) Summary(pr string, part int) string {
	return fmt.Sprintf("<!-- prq:summary part=%d tag=%s -->", part, m.tag("summary", pr, fmt.Sprint(part)))
}

// Review marks the review of one head.
func (m Markers) Review(pr, head string) string {
	return fmt.Sprintf("<!-- prq:review head=%s tag=%s -->", head, m.tag("review", pr, head))
}

// Finding marks a line comment with the key of its finding
// (review.Key): the finding's identity, found again on GitHub.
func (m Markers) Finding(pr, key string) string {
	return fmt.Sprintf("<!-- prq:finding key=%s tag=%s -->", key, m.tag("finding", pr, key))
}

// Reply marks the reply to one comment.
func (m Markers) Reply(pr string, comment int64) string {
	return fmt.Sprintf("<!-- prq:reply to=%d tag=%s -->", comment, m.tag("reply", pr, fmt.Sprint(comment)))
}

// CheckRun is the external id of a head's check run.
func (m Markers) CheckRun(pr, head string) string {
	return "prq:" + m.tag("check", pr, head)
}
