package ghapp_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/ghapp"
)

func TestMain(m *testing.M) {
	// go-github v56 never closes an error answer's original body; the
	// client's deadline ends with the body's last byte (no
	// Client.Timeout goroutine left behind)
	goleak.VerifyTestMain(m)
}

const appID = 42

var (
	keyOnce sync.Once
	key     *rsa.PrivateKey
	keyPEM  []byte
)

func testKey(t *testing.T) (*rsa.PrivateKey, []byte) {
	t.Helper()
	keyOnce.Do(func() {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		key, keyPEM = k, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
	})
	return key, keyPEM
}

// counter counts requests by path through a transport of its own, whose
// idle connections close when the test ends (goleak).
type counter struct {
	base *http.Transport
	mu   sync.Mutex
	hits map[string]int
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.hits[r.URL.Path]++
	c.mu.Unlock()
	return c.base.RoundTrip(r)
}

func (c *counter) count(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits[path]
}

type fixture struct {
	fake   *fakegithub.Server
	app    *ghapp.App
	client *ghapp.Client
	tr     *counter
}

// setup serves a fake GitHub on its own httptest server with one PR of
// installation 1 (acme/api#7, files given) and returns the App's client
// of installation 1.
func setup(t *testing.T, cfg fakegithub.Config, files []corpus.File) fixture {
	t.Helper()
	k, pemBytes := testKey(t)
	cfg.AppID, cfg.PublicKey = appID, &k.PublicKey
	fake := fakegithub.New(cfg)
	srv := httptest.NewServer(fake)
	tr := &counter{base: &http.Transport{}, hits: map[string]int{}}
	t.Cleanup(func() {
		tr.base.CloseIdleConnections()
		srv.Close()
	})
	app, err := ghapp.New(appID, pemBytes, srv.URL+"/api/v3", tr)
	if err != nil {
		t.Fatal(err)
	}
	fake.AddPR(1, "", "", corpus.PR{Repo: "acme/api", Number: 7, Title: "Add a flag", HeadSHA: strings.Repeat("a", 40), BaseSHA: strings.Repeat("b", 40), Files: files})
	c, err := app.Client(1)
	if err != nil {
		t.Fatal(err)
	}
	return fixture{fake: fake, app: app, client: c, tr: tr}
}

func file(name, patch string) corpus.File {
	return corpus.File{Filename: name, Status: "modified", Additions: 1, Deletions: 1, Changes: 2, Patch: &patch}
}

func manyFiles(n int) []corpus.File {
	out := make([]corpus.File, n)
	for i := range out {
		out[i] = file(fmt.Sprintf("f%04d.go", i), "@@ -1 +1 @@\n-a\n+b")
	}
	return out
}

const patch = "@@ -1,3 +1,4 @@\n package main\n-var a = 1\n+var a = 2\n+var b = 3\n func main() {}"

func TestNewRefusesBadInput(t *testing.T) {
	t.Parallel()
	_, pemBytes := testKey(t)
	tests := []struct {
		name   string
		id     int64
		key    []byte
		url    string
		wantIn string
	}{
		{"zero app id", 0, pemBytes, "", "app id"},
		{"key not PEM", appID, []byte("not-a-key-secret-material"), "", "not PEM"},
		{"PEM but not RSA", appID, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: []byte("junk-secret")}), "", "not an RSA key"},
		{"URL not http", appID, pemBytes, "ftp://example.com/", "not an http(s) URL"},
		{"URL without host", appID, pemBytes, "https://", "not an http(s) URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ghapp.New(tt.id, tt.key, tt.url, nil)
			if err == nil || !strings.Contains(err.Error(), tt.wantIn) {
				t.Fatalf("err %v, want one saying %q", err, tt.wantIn)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("the error echoes the key: %v", err)
			}
		})
	}
	app, err := ghapp.New(appID, pemBytes, "https://ghe.example.com/api/v3", nil)
	if err != nil || app.BaseURL() != "https://ghe.example.com/api/v3/" {
		t.Fatalf("Enterprise base URL: %v %v", app.BaseURL(), err)
	}
}

// TestTokenMinting: the App signs a JWT the fake verifies, gets an
// installation token once, and reuses it for later calls; another
// installation's client sees the PR as missing, as on GitHub.
func TestTokenMinting(t *testing.T) {
	t.Parallel()
	f := setup(t, fakegithub.Config{}, []corpus.File{file("main.go", patch)})
	ctx := context.Background()
	pr, err := f.client.PR(ctx, "acme", "api", 7)
	if err != nil {
		t.Fatal(err)
	}
	want := ghapp.PullRequest{Number: 7, State: "open", Title: "Add a flag", HeadSHA: strings.Repeat("a", 40), BaseSHA: strings.Repeat("b", 40), BaseRef: "main", Author: "octocat"}
	if !reflect.DeepEqual(pr, want) {
		t.Fatalf("PR %+v, want %+v", pr, want)
	}
	if _, err := f.client.PR(ctx, "acme", "api", 7); err != nil {
		t.Fatal(err)
	}
	if n := f.tr.count("/api/v3/app/installations/1/access_tokens"); n != 1 {
		t.Fatalf("minted %d tokens for two calls, want 1", n)
	}
	if again, _ := f.app.Client(1); again != f.client {
		t.Fatal("the installation's client is not cached")
	}
	itr, err := f.app.Transport(1)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := itr.Token(ctx)
	if err != nil || !strings.HasPrefix(tok, "ghs_") {
		t.Fatalf("raw token %q %v", tok, err)
	}
	other, _ := f.app.Client(2)
	if _, err := other.PR(ctx, "acme", "api", 7); !errors.Is(err, ghapp.ErrNotFound) {
		t.Fatalf("another installation's PR: %v, want ErrNotFound", err)
	}
}

func TestTokenRefusedForAnotherApp(t *testing.T) {
	t.Parallel()
	f := setup(t, fakegithub.Config{}, nil)
	_, pemBytes := testKey(t)
	wrong, err := ghapp.New(appID+1, pemBytes, f.app.BaseURL(), f.tr)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := wrong.Client(1)
	if _, err := c.PR(context.Background(), "acme", "api", 7); err == nil {
		t.Fatal("a JWT with the wrong issuer got a token")
	}
}

func TestFilesPaginate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		files, pages int
		want         int
	}{
		{"one page", 3, 1, 3},
		{"exactly a page", 100, 1, 100},
		{"three pages", 250, 3, 250},
		{"over GitHub's cap", 3100, 30, ghapp.MaxFiles},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, fakegithub.Config{}, manyFiles(tt.files))
			got, err := f.client.Files(context.Background(), "acme", "api", 7)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.want || got[len(got)-1].Filename != fmt.Sprintf("f%04d.go", tt.want-1) {
				t.Fatalf("%d files, last %s; want %d", len(got), got[len(got)-1].Filename, tt.want)
			}
			if n := f.tr.count("/api/v3/repos/acme/api/pulls/7/files"); n != tt.pages {
				t.Fatalf("%d requests, want %d pages of 100", n, tt.pages)
			}
		})
	}
}

func TestFilesKeepsNilPatch(t *testing.T) {
	t.Parallel()
	bin := corpus.File{Filename: "logo.png", Status: "added"}
	f := setup(t, fakegithub.Config{}, []corpus.File{file("main.go", patch), bin})
	got, err := f.client.Files(context.Background(), "acme", "api", 7)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Patch == nil || *got[0].Patch != patch || got[1].Patch != nil {
		t.Fatalf("patches: %+v", got)
	}
}

func TestCompare(t *testing.T) {
	t.Parallel()
	f := setup(t, fakegithub.Config{}, []corpus.File{file("main.go", patch), file("util.go", patch)})
	ctx := context.Background()
	head := strings.Repeat("c", 40)
	if err := f.fake.Push("acme", "api", 7, head, []corpus.File{file("util.go", "@@ -1 +1 @@\n-x\n+y")}); err != nil {
		t.Fatal(err)
	}
	got, err := f.client.Compare(ctx, "acme", "api", strings.Repeat("a", 40), head)
	if err != nil || len(got) != 1 || got[0].Filename != "util.go" {
		t.Fatalf("compare: %+v %v", got, err)
	}
	if _, err := f.client.Compare(ctx, "acme", "api", "nope", head); !errors.Is(err, ghapp.ErrNotFound) {
		t.Fatalf("unknown base: %v, want ErrNotFound", err)
	}
}

// TestUpsertCommentByMarker: the first upsert creates; later ones find the
// comment by its marker (past the first page of comments) and edit it.
func TestUpsertCommentByMarker(t *testing.T) {
	t.Parallel()
	f := setup(t, fakegithub.Config{WritesPerPeriod: -1}, nil)
	ctx := context.Background()
	for i := 0; i < 120; i++ { // push the bot's comment onto page two
		if _, err := f.client.Comment(ctx, "acme", "api", 7, fmt.Sprintf("human comment %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	const marker = "<!-- prq:summary -->"
	id, err := f.client.UpsertComment(ctx, "acme", "api", 7, 0, marker, marker+"\nfirst")
	if err != nil {
		t.Fatal(err)
	}
	id2, err := f.client.UpsertComment(ctx, "acme", "api", 7, 0, marker, marker+"\nsecond")
	if err != nil || id2 != id {
		t.Fatalf("second upsert: id %d %v, want %d (found by marker)", id2, err, id)
	}
	id3, err := f.client.UpsertComment(ctx, "acme", "api", 7, id, marker, marker+"\nthird")
	if err != nil || id3 != id {
		t.Fatalf("upsert by known id: %d %v", id3, err)
	}
	st := f.fake.Stats("acme", "api", 7)
	if st.CommentsCreated != 121 || st.CommentsEdited != 2 {
		t.Fatalf("created %d edited %d, want 121 and 2", st.CommentsCreated, st.CommentsEdited)
	}
	// a known id that no longer exists: create anew rather than fail
	id4, err := f.client.UpsertComment(ctx, "acme", "api", 7, 999999, "<!-- other -->", "<!-- other -->\nx")
	if err != nil || id4 == 0 || id4 == id {
		t.Fatalf("stale known id: %d %v", id4, err)
	}
}

func TestCreateReviewAndHasReview(t *testing.T) {
	t.Parallel()
	f := setup(t, fakegithub.Config{}, []corpus.File{file("main.go", patch)})
	ctx := context.Background()
	head := strings.Repeat("a", 40)
	const marker = "<!-- prq:review -->"
	if id, err := f.client.HasReview(ctx, "acme", "api", 7, marker); err != nil || id != 0 {
		t.Fatalf("before any review: %d %v", id, err)
	}
	// a line outside the diff: GitHub's 422, mapped to ErrUnprocessable
	_, err := f.client.CreateReview(ctx, "acme", "api", 7, head, marker, []ghapp.ReviewComment{{Path: "main.go", Line: 40, Side: "RIGHT", Body: "x"}})
	if !errors.Is(err, ghapp.ErrUnprocessable) {
		t.Fatalf("comment outside the diff: %v, want ErrUnprocessable", err)
	}
	id, err := f.client.CreateReview(ctx, "acme", "api", 7, head, marker+"\nLooks fine.", []ghapp.ReviewComment{
		{Path: "main.go", Line: 2, Side: "RIGHT", Body: "why 2?"},
		{Path: "main.go", StartLine: 2, Line: 3, Side: "RIGHT", Body: "a range"},
		{Path: "main.go", Line: 2, Side: "LEFT", Body: "the old line"},
	})
	if err != nil || id == 0 {
		t.Fatalf("review: %d %v", id, err)
	}
	got, err := f.client.HasReview(ctx, "acme", "api", 7, marker)
	if err != nil || got != id {
		t.Fatalf("HasReview %d %v, want %d", got, err, id)
	}
	rcs := f.fake.ReviewComments("acme", "api", 7)
	if len(rcs) != 3 || rcs[1].StartLine != 2 || rcs[2].Side != "LEFT" {
		t.Fatalf("review comments %+v", rcs)
	}
}

func TestReply(t *testing.T) {
	t.Parallel()
	f := setup(t, fakegithub.Config{}, []corpus.File{file("main.go", patch)})
	root := f.fake.AddReviewComment("acme", "api", 7, "main.go", 2, "@prq-bot why?", "dev")
	id, err := f.client.Reply(context.Background(), "acme", "api", 7, root, "Because.")
	if err != nil || id == 0 {
		t.Fatalf("reply: %d %v", id, err)
	}
	for _, rc := range f.fake.ReviewComments("acme", "api", 7) {
		if rc.ID == id && rc.InReplyTo == root && rc.Body == "Because." {
			return
		}
	}
	t.Fatalf("no reply to %d among %+v", root, f.fake.ReviewComments("acme", "api", 7))
}

// TestErrorsAreTyped: GitHub's failures reach the caller as values to
// branch on: the secondary limit (403 or 429) with its retry time, 404,
// and 5xx as transient.
func TestErrorsAreTyped(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusForbidden, http.StatusTooManyRequests} {
		t.Run(fmt.Sprintf("secondary limit %d", status), func(t *testing.T) {
			t.Parallel()
			f := setup(t, fakegithub.Config{WritesPerPeriod: 2, LimitStatus: status}, nil)
			ctx := context.Background()
			for i := 0; i < 2; i++ {
				if _, err := f.client.Comment(ctx, "acme", "api", 7, fmt.Sprint("c", i)); err != nil {
					t.Fatal(err)
				}
			}
			_, err := f.client.Comment(ctx, "acme", "api", 7, "one too many")
			var rl *ghapp.RateLimitedError
			if !errors.As(err, &rl) || !rl.Secondary || rl.RetryAfter <= 0 {
				t.Fatalf("third write: %v, want a secondary *RateLimitedError with a retry time", err)
			}
		})
	}
	t.Run("server error", func(t *testing.T) {
		t.Parallel()
		f := setup(t, fakegithub.Config{}, nil)
		f.fake.FailNext("/pulls/7", http.StatusBadGateway)
		_, err := f.client.PR(context.Background(), "acme", "api", 7)
		var te *ghapp.TransientError
		if !errors.As(err, &te) {
			t.Fatalf("502: %v, want *TransientError", err)
		}
	})
	t.Run("removed PR", func(t *testing.T) {
		t.Parallel()
		f := setup(t, fakegithub.Config{}, nil)
		f.fake.Remove("acme", "api", 7)
		if _, err := f.client.Files(context.Background(), "acme", "api", 7); !errors.Is(err, ghapp.ErrNotFound) {
			t.Fatalf("removed PR: %v, want ErrNotFound", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		f := setup(t, fakegithub.Config{}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := f.client.PR(ctx, "acme", "api", 7)
		var te *ghapp.TransientError
		if !errors.Is(err, context.Canceled) || errors.As(err, &te) {
			t.Fatalf("cancelled call: %v, want context.Canceled, not transient", err)
		}
	})
}

// TestHasReplyFindsTheBotsReplyByMarker: a reply in a diff thread is
// found among the review comments, a conversation reply among the
// comments, past the first page of each; a human's copy of the marker
// does not count.
func TestHasReplyFindsTheBotsReplyByMarker(t *testing.T) {
	t.Parallel()
	f := setup(t, fakegithub.Config{WritesPerPeriod: -1}, []corpus.File{file("main.go", patch)})
	ctx := context.Background()
	const marker = "<!-- prq:reply to=5 tag=x -->"
	root := f.fake.AddReviewComment("acme", "api", 7, "main.go", 2, "@prq-bot why? "+marker, "dev")
	f.fake.AddComment("acme", "api", 7, "copied "+marker, "mallory")
	for i := 0; i < 110; i++ { // push the bot's replies onto page two
		f.fake.AddReviewComment("acme", "api", 7, "main.go", 2, fmt.Sprintf("human %d", i), "dev")
		f.fake.AddComment("acme", "api", 7, fmt.Sprintf("human %d", i), "dev")
	}
	for _, review := range []bool{true, false} {
		if id, err := f.client.HasReply(ctx, "acme", "api", 7, review, marker); err != nil || id != 0 {
			t.Fatalf("review=%v before the reply: %d %v (only the bot's replies count)", review, id, err)
		}
	}
	threadID, err := f.client.Reply(ctx, "acme", "api", 7, root, "Because.\n\n"+marker)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := f.client.HasReply(ctx, "acme", "api", 7, true, marker); err != nil || id != threadID {
		t.Fatalf("thread reply: %d %v, want %d", id, err, threadID)
	}
	if id, err := f.client.HasReply(ctx, "acme", "api", 7, false, marker); err != nil || id != 0 {
		t.Fatalf("conversation before its reply: %d %v", id, err)
	}
	convID, err := f.client.Comment(ctx, "acme", "api", 7, "@dev Because.\n\n"+marker)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := f.client.HasReply(ctx, "acme", "api", 7, false, marker); err != nil || id != convID {
		t.Fatalf("conversation reply: %d %v, want %d", id, err, convID)
	}
}

// TestCompareTruncatedAtGitHubsCap: GitHub lists at most 300 files of a
// comparison; Compare says so instead of passing the rest as unchanged.
func TestCompareTruncatedAtGitHubsCap(t *testing.T) {
	t.Parallel()
	f := setup(t, fakegithub.Config{}, []corpus.File{file("main.go", patch)})
	ctx := context.Background()
	head := strings.Repeat("d", 40)
	changed := make([]corpus.File, 0, 350)
	for i := 0; i < 350; i++ {
		changed = append(changed, file(fmt.Sprintf("f%03d.go", i), "@@ -1 +1 @@\n-x\n+y"))
	}
	if err := f.fake.Push("acme", "api", 7, head, changed); err != nil {
		t.Fatal(err)
	}
	got, err := f.client.Compare(ctx, "acme", "api", strings.Repeat("a", 40), head)
	if !errors.Is(err, ghapp.ErrCompareTruncated) || len(got) != ghapp.MaxCompareFiles {
		t.Fatalf("compare of 350 files: %d files, %v; want %d and ErrCompareTruncated", len(got), err, ghapp.MaxCompareFiles)
	}
}

// TestTokenRefusedForAnUninstalledOrSuspendedInstallation: GitHub answers
// 404 (uninstalled) or 403 (suspended) when the installation's token is
// minted; that is permanent for the installation, not transient (before:
// a TransientError, retried 10 to 20 times).
func TestTokenRefusedForAnUninstalledOrSuspendedInstallation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		refuse func(*fakegithub.Server)
		status int
		reason string
	}{
		{"uninstalled", func(f *fakegithub.Server) { f.Uninstall(1) }, 404, "uninstalled"},
		{"suspended", func(f *fakegithub.Server) { f.Suspend(1) }, 403, "suspended"},
	} {
		f := setup(t, fakegithub.Config{}, []corpus.File{file("main.go", patch)})
		tc.refuse(f.fake)
		_, err := f.client.PR(context.Background(), "acme", "api", 7)
		var refused *ghapp.InstallationRefusedError
		if !errors.As(err, &refused) || refused.Status != tc.status || refused.Installation != 1 || refused.Reason() != tc.reason {
			t.Fatalf("%s: %v, want InstallationRefusedError %d", tc.name, err, tc.status)
		}
		var transient *ghapp.TransientError
		if errors.As(err, &transient) {
			t.Fatalf("%s: classified transient: %v", tc.name, err)
		}
		f.fake.Reinstall(1)
		if _, err := f.client.PR(context.Background(), "acme", "api", 7); err != nil {
			t.Fatalf("%s: after reinstalling: %v", tc.name, err)
		}
	}
}
