package workers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/ghapp"
)

// contentsOnly is a PRReader that only serves files.
type contentsOnly struct {
	PRReader
	files map[string]string // "repo:path@ref" -> content; ref "" the default branch
	err   map[string]error  // "repo:path" -> the error answered
	reads int
}

func (c *contentsOnly) Contents(_ context.Context, _, repo, path, ref string) (ghapp.FileContent, error) {
	c.reads++
	if err := c.err[repo+":"+path]; err != nil {
		return ghapp.FileContent{Size: 2 << 20}, err
	}
	body, ok := c.files[repo+":"+path+"@"+ref]
	if !ok {
		return ghapp.FileContent{}, ghapp.ErrNotFound
	}
	return ghapp.FileContent{Path: path, SHA: "sha-" + body, Size: len(body), Content: []byte(body)}, nil
}

func TestRepoConfigsLayersAndProblems(t *testing.T) {
	now := time.Unix(1e9, 0)
	rc := newRepoConfigs(func() time.Time { return now })
	ctx := context.Background()
	gh := &contentsOnly{files: map[string]string{
		".github:prq.yaml@":      "language: ja\nchat: false\n",
		"api:.github/prq.yaml@b": "chat: true\n",
		"web:.prq.yaml@b":        "reviews: [nope]\n",
	}, err: map[string]error{
		"big:.prq.yaml":    ghapp.ErrTooLarge,
		"locked:.prq.yaml": ghapp.ErrForbidden,
		"flaky:.prq.yaml":  errors.New("get contents: 502"),
	}}
	c, notice, err := rc.effective(ctx, gh, "acme", "api", "b")
	if err != nil || notice != "" || c.Language != "ja" || !c.Chat || strings.Join(c.Sources, " | ") != "defaults | acme/.github:prq.yaml | acme/api:.github/prq.yaml at b" {
		t.Errorf("layers: %+v %q %v", c, notice, err)
	}
	c, notice, _ = rc.effective(ctx, gh, "acme", "web", "b")
	if c.Chat || notice != "acme/web:.prq.yaml at b line 1: reviews: reviews must be a mapping of settings, not a list. Applied instead: acme/.github:prq.yaml over defaults." {
		t.Errorf("an invalid file: chat %v, notice %q", c.Chat, notice)
	}
	if _, notice, _ := rc.effective(ctx, gh, "acme", "big", "b"); !strings.Contains(notice, "acme/big:.prq.yaml at b could not be used: the file is 2097152 bytes, over the limit of 65536.") {
		t.Errorf("too large: %q", notice)
	}
	if _, notice, _ := rc.effective(ctx, gh, "acme", "locked", "b"); !strings.Contains(notice, "GitHub refused the App (it needs the contents: read permission)") {
		t.Errorf("forbidden: %q", notice)
	}
	if _, _, err := rc.effective(ctx, gh, "acme", "flaky", "b"); err == nil {
		t.Errorf("a failing GitHub is an error (the plan retries), not the defaults")
	}
	// a commit's file is read once; the organisation's again after orgTTL
	before := gh.reads
	rc.effective(ctx, gh, "acme", "api", "b")
	if gh.reads != before {
		t.Errorf("%d reads for a cached commit and organisation", gh.reads-before)
	}
	now = now.Add(orgTTL)
	rc.effective(ctx, gh, "acme", "api", "b")
	if gh.reads != before+1 {
		t.Errorf("%d reads after orgTTL, want 1 (the organisation's)", gh.reads-before)
	}
}
