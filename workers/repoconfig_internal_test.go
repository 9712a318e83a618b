package workers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
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
	rc := newRepoConfigs(func() time.Time { return now }, nil)
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
	c, notice, err := rc.effective(ctx, gh, 1, "acme", "api", "b")
	if err != nil || notice != "" || c.Language != "ja" || !c.Chat || strings.Join(c.Sources, " | ") != "defaults | acme/.github:prq.yaml | acme/api:.github/prq.yaml at b" {
		t.Errorf("layers: %+v %q %v", c, notice, err)
	}
	c, notice, _ = rc.effective(ctx, gh, 1, "acme", "web", "b")
	if c.Chat || notice != "acme/web:.prq.yaml at b line 1: reviews: reviews must be a mapping of settings, not a list. Applied instead: acme/.github:prq.yaml over defaults." {
		t.Errorf("an invalid file: chat %v, notice %q", c.Chat, notice)
	}
	if _, notice, _ := rc.effective(ctx, gh, 1, "acme", "big", "b"); !strings.Contains(notice, "acme/big:.prq.yaml at b could not be used: the file is 2097152 bytes, over the limit of 65536.") {
		t.Errorf("too large: %q", notice)
	}
	if _, notice, _ := rc.effective(ctx, gh, 1, "acme", "locked", "b"); !strings.Contains(notice, "GitHub refused the App (it needs the contents: read permission)") {
		t.Errorf("forbidden: %q", notice)
	}
	if _, _, err := rc.effective(ctx, gh, 1, "acme", "flaky", "b"); err == nil {
		t.Errorf("a failing GitHub is an error (the plan retries), not the defaults")
	}
	// a commit's file is read once; the organisation's again after orgTTL
	before := gh.reads
	rc.effective(ctx, gh, 1, "acme", "api", "b")
	if gh.reads != before {
		t.Errorf("%d reads for a cached commit and organisation", gh.reads-before)
	}
	now = now.Add(orgTTL)
	rc.effective(ctx, gh, 1, "acme", "api", "b")
	if gh.reads != before+1 {
		t.Errorf("%d reads after orgTTL, want 1 (the organisation's)", gh.reads-before)
	}
}

// TestRepoConfigFallsBackToLastValid: a repository's file that cannot
// be used is reported, and its last valid version (kept in Redis, per
// installation) applies instead of the layers beneath; an organisation
// default stays beneath it.
func TestRepoConfigFallsBackToLastValid(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	st := store.New(rdb, jobs.TierFree)
	clk := time.Unix(1.9e9, 0)
	rc := newRepoConfigs(func() time.Time { return clk }, st)
	gh := &contentsOnly{files: map[string]string{
		".github:prq.yaml@":  "chat: false\n",
		"web:.prq.yaml@b1":   "language: ja\n",
		"web:.prq.yaml@b2":   "language: ja\nreviews: [nope]\n",
		"web:.prq.yaml@b3":   "language: pt-BR\n",
		"web:.prq.yaml@b4":   "reviews: {max_files: 0}\n",
		"never:.prq.yaml@b1": "instructions: [x]\n",
	}}
	const inst = 77
	if c, notice, err := rc.effective(ctx, gh, inst, "acme", "web", "b1"); err != nil || notice != "" || c.Language != "ja" {
		t.Fatalf("valid file: %+v %q %v", c, notice, err)
	}
	c, notice, err := rc.effective(ctx, gh, inst, "acme", "web", "b2")
	if err != nil || c.Language != "ja" || c.Chat {
		t.Fatalf("broken edit: language %q chat %v (%v), want the last valid file's ja over the organisation's chat: false", c.Language, c.Chat, err)
	}
	want := "Applied instead: acme/web:.prq.yaml at b1 (its last valid version, blob sha-lan) over acme/.github:prq.yaml over defaults."
	if !strings.Contains(notice, "acme/web:.prq.yaml at b2 line 2: reviews:") || !strings.HasSuffix(notice, want) {
		t.Errorf("notice %q, want the problem and %q", notice, want)
	}
	// another installation's repository of the same name keeps nothing of this one
	if c, _, _ := rc.effective(ctx, gh, inst+1, "acme", "web", "b2"); c.Language != "" {
		t.Errorf("another installation's fallback: language %q, want the defaults'", c.Language)
	}
	// a newer valid file becomes the one fallen back to
	if c, _, _ := rc.effective(ctx, gh, inst, "acme", "web", "b3"); c.Language != "pt-BR" {
		t.Fatalf("newer valid file: language %q", c.Language)
	}
	if c, notice, _ := rc.effective(ctx, gh, inst, "acme", "web", "b4"); c.Language != "pt-BR" || !strings.Contains(notice, "at b3 (its last valid version") {
		t.Errorf("after a newer valid file: language %q, notice %q", c.Language, notice)
	}
	// the same valid file read again a day later renews the kept one's lifetime
	rdb.PExpire(ctx, "prq:repocfg:77:acme/web", time.Hour)
	clk = clk.Add(25 * time.Hour)
	rc.effective(ctx, gh, inst, "acme", "web", "b3")
	if ttl := rdb.PTTL(ctx, "prq:repocfg:77:acme/web").Val(); ttl < store.LastConfigTTL-time.Minute {
		t.Errorf("the kept file's lifetime is %s after it was read valid again, want it renewed to %s", ttl, store.LastConfigTTL)
	}
	// never valid: the layers beneath
	if c, notice, _ := rc.effective(ctx, gh, inst, "acme", "never", "b1"); c.Chat || !strings.HasSuffix(notice, "Applied instead: acme/.github:prq.yaml over defaults.") {
		t.Errorf("never valid: chat %v, notice %q", c.Chat, notice)
	}
}
