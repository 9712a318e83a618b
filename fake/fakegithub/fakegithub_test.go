package fakegithub_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v4"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/ghapp"
)

var (
	keyOnce sync.Once
	key     *rsa.PrivateKey
)

func testKey(t *testing.T) (*rsa.PrivateKey, []byte) {
	keyOnce.Do(func() {
		var err error
		if key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
	})
	return key, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func setup(t *testing.T, cfg fakegithub.Config, prefix string) (*fakegithub.Server, *ghapp.App, *clock) {
	t.Helper()
	k, pemBytes := testKey(t)
	clk := &clock{t: time.Now()}
	cfg.AppID, cfg.PublicKey, cfg.NowFunc = 42, &k.PublicKey, clk.now
	fake := fakegithub.New(cfg)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	app, err := ghapp.New(42, pemBytes, srv.URL+prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fake, app, clk
}

func bigPR(n int) corpus.PR {
	pr := corpus.PR{Repo: "acme/big", Number: 7, HeadSHA: strings.Repeat("a", 40), BaseSHA: strings.Repeat("b", 40)}
	for i := 0; i < n; i++ {
		p := "@@ -1 +1 @@\n-a\n+b"
		pr.Files = append(pr.Files, corpus.File{Filename: fmt.Sprintf("f%04d.go", i), Status: "modified", Additions: 1, Deletions: 1, Changes: 2, Patch: &p})
	}
	return pr
}

func TestPaginationAndCap(t *testing.T) {
	fake, app, _ := setup(t, fakegithub.Config{}, "/api/v3/")
	fake.AddPR(1, "", "", bigPR(3100))
	c, _ := app.Client(1)
	files, err := c.Files(context.Background(), "acme", "big", 7)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3000 || files[2999].Filename != "f2999.go" {
		t.Fatalf("got %d files, want GitHub's cap of 3000", len(files))
	}
}

func TestLinkHeaderFormat(t *testing.T) {
	k, _ := testKey(t)
	fake := fakegithub.New(fakegithub.Config{AppID: 42, PublicKey: &k.PublicKey})
	fake.AddPR(1, "", "", bigPR(250))
	srv := httptest.NewServer(fake)
	defer srv.Close()
	_, app, _ := setup(t, fakegithub.Config{}, "")
	_ = app
	tok := mintToken(t, srv.URL, 1)
	req, _ := http.NewRequest("GET", srv.URL+"/repos/acme/big/pulls/7/files?per_page=100&page=2", nil)
	req.Header.Set("Authorization", "token "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`<%[1]s/repos/acme/big/pulls/7/files?page=1&per_page=100>; rel="prev", <%[1]s/repos/acme/big/pulls/7/files?page=3&per_page=100>; rel="next", <%[1]s/repos/acme/big/pulls/7/files?page=3&per_page=100>; rel="last", <%[1]s/repos/acme/big/pulls/7/files?page=1&per_page=100>; rel="first"`, srv.URL)
	if got := resp.Header.Get("Link"); got != want {
		t.Fatalf("Link:\n got %s\nwant %s", got, want)
	}
}

func mintToken(t *testing.T, base string, inst int64) string {
	t.Helper()
	k, pemBytes := testKey(t)
	_ = k
	app, err := ghapp.New(42, pemBytes, base, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := app.Transport(inst)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tr.Token(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestJWTAndTokens(t *testing.T) {
	fake, app, clk := setup(t, fakegithub.Config{TokenTTL: time.Hour}, "")
	fake.AddPR(1, "", "", bigPR(1))
	fake.AddPR(2, "other", "repo", bigPR(1))
	c, _ := app.Client(1)
	ctx := context.Background()
	if _, err := c.PR(ctx, "acme", "big", 7); err != nil {
		t.Fatalf("valid app: %v", err)
	}
	if _, err := c.PR(ctx, "other", "repo", 7); !errors.Is(err, ghapp.ErrNotFound) {
		t.Fatalf("another installation's repo must be 404, got %v", err)
	}

	// A JWT signed with another key is refused.
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	otherPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(other)})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	bad, _ := ghapp.New(42, otherPEM, srv.URL, nil)
	bc, _ := bad.Client(1)
	if _, err := bc.PR(ctx, "acme", "big", 7); err == nil {
		t.Fatal("a JWT with the wrong key was accepted")
	}
	// An expired installation token is refused.
	tok := mintToken(t, srv.URL, 1)
	clk.add(2 * time.Hour)
	req, _ := http.NewRequest("GET", srv.URL+"/repos/acme/big/pulls/7", nil)
	req.Header.Set("Authorization", "token "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 401 {
		t.Fatalf("expired token: status %d, want 401", resp.StatusCode)
	}
}

func TestReviewValidation(t *testing.T) {
	fake, app, _ := setup(t, fakegithub.Config{}, "")
	p := "@@ -10,3 +10,4 @@\n a\n-b\n+c\n+d\n e"
	pr := corpus.PR{Repo: "acme/r", Number: 3, HeadSHA: "h1", Files: []corpus.File{{Filename: "x.go", Status: "modified", Patch: &p}}}
	fake.AddPR(1, "", "", pr)
	c, _ := app.Client(1)
	ctx := context.Background()
	_, err := c.CreateReview(ctx, "acme", "r", 3, "h1", "ok", []ghapp.ReviewComment{{Path: "x.go", Line: 11, Side: "RIGHT", Body: "on an added line"}, {Path: "x.go", Line: 11, Side: "LEFT", Body: "deleted line"}})
	if err != nil {
		t.Fatalf("valid review: %v", err)
	}
	_, err = c.CreateReview(ctx, "acme", "r", 3, "h1", "bad", []ghapp.ReviewComment{{Path: "x.go", Line: 40, Side: "RIGHT", Body: "outside"}})
	if !errors.Is(err, ghapp.ErrUnprocessable) {
		t.Fatalf("comment outside the diff: want 422, got %v", err)
	}
	_, err = c.CreateReview(ctx, "acme", "r", 3, "h1", "range", []ghapp.ReviewComment{{Path: "x.go", StartLine: 10, Line: 12, Side: "RIGHT", Body: "range"}})
	if err != nil {
		t.Fatalf("range in one hunk: %v", err)
	}
	if st := fake.Stats("acme", "r", 3); st.Reviews != 2 || st.Rejected != 1 || st.ReviewComments != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestPositionWithLineRejected(t *testing.T) {
	fake, app, _ := setup(t, fakegithub.Config{}, "")
	fake.AddPR(1, "", "", bigPR(1))
	tr, _ := app.Transport(1)
	tok, _ := tr.Token(context.Background())
	_ = tok
	srv := httptest.NewServer(fake)
	defer srv.Close()
	tk := mintToken(t, srv.URL, 1)
	body := `{"commit_id":"` + strings.Repeat("a", 40) + `","event":"COMMENT","comments":[{"path":"f0000.go","position":1,"line":1,"body":"x"}]}`
	req, _ := http.NewRequest("POST", srv.URL+"/repos/acme/big/pulls/7/reviews", strings.NewReader(body))
	req.Header.Set("Authorization", "token "+tk)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 422 {
		t.Fatalf("position with line: %d, want 422", resp.StatusCode)
	}
}

func TestSecondaryLimit(t *testing.T) {
	for _, status := range []int{403, 429} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			fake, app, clk := setup(t, fakegithub.Config{WritesPerPeriod: 3, LimitStatus: status}, "")
			fake.AddPR(1, "", "", bigPR(1))
			c, _ := app.Client(1)
			ctx := context.Background()
			for i := 0; i < 3; i++ {
				if _, err := c.Comment(ctx, "acme", "big", 7, fmt.Sprint("hello ", i)); err != nil {
					t.Fatal(err)
				}
			}
			_, err := c.Comment(ctx, "acme", "big", 7, "one too many")
			var rl *ghapp.RateLimitedError
			if !errors.As(err, &rl) || rl.RetryAfter <= 0 || rl.RetryAfter > 61*time.Second {
				t.Fatalf("want a secondary limit with retry-after, got %v", err)
			}
			clk.add(time.Minute)
			// go-github remembers a secondary limit in real time, so ask
			// the fake with a fresh client of the same App.
			_, pemBytes := testKey(t)
			fresh, _ := ghapp.New(42, pemBytes, app.BaseURL(), nil)
			fc, _ := fresh.Client(1)
			if _, err := fc.Comment(ctx, "acme", "big", 7, "later"); err != nil {
				t.Fatalf("after the window: %v", err)
			}
		})
	}
}

func TestUpsertAndCompare(t *testing.T) {
	fake, app, _ := setup(t, fakegithub.Config{}, "")
	pr := bigPR(2)
	fake.AddPR(1, "", "", pr)
	c, _ := app.Client(1)
	ctx := context.Background()
	id1, err := c.UpsertComment(ctx, "acme", "big", 7, 0, "<!-- m -->", "v1 <!-- m -->")
	if err != nil {
		t.Fatal(err)
	}
	id2, err := c.UpsertComment(ctx, "acme", "big", 7, 0, "<!-- m -->", "v2 <!-- m -->")
	if err != nil || id2 != id1 {
		t.Fatalf("upsert created a second comment: %d %d %v", id1, id2, err)
	}
	if cs := fake.Comments("acme", "big", 7); len(cs) != 1 || !strings.HasPrefix(cs[0].Body, "v2") {
		t.Fatalf("comments %+v", cs)
	}
	p := "@@ -1 +1,2 @@\n a\n+new"
	if err := fake.Push("acme", "big", 7, "newhead", []corpus.File{{Filename: "f0001.go", Status: "modified", Patch: &p}}); err != nil {
		t.Fatal(err)
	}
	files, err := c.Compare(ctx, "acme", "big", pr.HeadSHA, "newhead")
	if err != nil || len(files) != 1 || files[0].Filename != "f0001.go" {
		t.Fatalf("compare: %v %+v", err, files)
	}
}

// TestAppEndpoints: GET /app and GET /app/installations take the App's JWT
// (not an installation token) and page installations with Link headers.
func TestAppEndpoints(t *testing.T) {
	k, _ := testKey(t)
	fake := fakegithub.New(fakegithub.Config{AppID: 42, PublicKey: &k.PublicKey})
	for id := int64(1); id <= 3; id++ {
		fake.AddInstallation(id, fmt.Sprintf("org%d", id))
	}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	sign := func(iss string) string {
		now := time.Now()
		tok, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: iss,
			IssuedAt: jwt.NewNumericDate(now.Add(-time.Minute)), ExpiresAt: jwt.NewNumericDate(now.Add(5 * time.Minute))}).SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	get := func(path, tok string) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, body := get("/api/v3/app", sign("42"))
	var app struct {
		ID          int64             `json:"id"`
		Permissions map[string]string `json:"permissions"`
		Events      []string          `json:"events"`
	}
	if err := json.Unmarshal(body, &app); resp.StatusCode != 200 || err != nil || app.ID != 42 || app.Permissions["pull_requests"] != "write" || len(app.Events) != 3 {
		t.Fatalf("GET /app: %d %s", resp.StatusCode, body)
	}
	if resp, body := get("/app", sign("43")); resp.StatusCode != 401 {
		t.Fatalf("GET /app with another App's id: %d %s", resp.StatusCode, body)
	}
	resp, body = get("/app/installations?per_page=2", sign("42"))
	var page []struct {
		ID      int64 `json:"id"`
		Account struct {
			Login string `json:"login"`
		} `json:"account"`
	}
	if err := json.Unmarshal(body, &page); err != nil || len(page) != 2 || page[0].Account.Login != "org1" || !strings.Contains(resp.Header.Get("Link"), `page=2>; rel="next"`) {
		t.Fatalf("page 1: %s %q", body, resp.Header.Get("Link"))
	}
	resp, body = get("/app/installations?per_page=2&page=2", sign("42"))
	if err := json.Unmarshal(body, &page); err != nil || len(page) != 1 || page[0].ID != 3 || resp.Header.Get("Link") != "" {
		t.Fatalf("page 2: %s %q", body, resp.Header.Get("Link"))
	}
}

// TestWriteAttemptsRecorded: every write made with an installation's
// token is recorded when it arrives, reads are not, and a write of an
// uninstalled installation is recorded as refused (and refused: 401).
// PushTitled moves the head and the title in one step.
func TestWriteAttemptsRecorded(t *testing.T) {
	fake, app, _ := setup(t, fakegithub.Config{}, "")
	fake.AddPR(1, "", "", bigPR(1))
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c, _ := app.Client(1)
	ctx := context.Background()
	if _, err := c.PR(ctx, "acme", "big", 7); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpsertComment(ctx, "acme", "big", 7, 0, "<!-- m -->", "hello <!-- m -->"); err != nil {
		t.Fatal(err)
	}
	tok := mintToken(t, srv.URL, 1)
	fake.Uninstall(1)
	req, _ := http.NewRequest("POST", srv.URL+"/repos/acme/big/issues/7/comments", strings.NewReader(`{"body":"again"}`))
	req.Header.Set("Authorization", "token "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("a write of an uninstalled installation: status %d, want 401", resp.StatusCode)
	}
	got := fake.WriteAttempts()
	var posts []fakegithub.WriteAttempt
	for _, w := range got {
		if w.Method == http.MethodGet {
			t.Errorf("a read recorded as a write: %+v", w)
		}
		if w.Method == http.MethodPost {
			posts = append(posts, w)
		}
	}
	if len(posts) != 2 || posts[0].Refused || !posts[1].Refused || posts[1].Installation != 1 || posts[1].Path != "/repos/acme/big/issues/7/comments" || posts[1].At.Before(posts[0].At) {
		t.Fatalf("write attempts %+v, want two comment posts, the second refused", got)
	}
	fake.Reinstall(1)
	if err := fake.PushTitled("acme", "big", 7, strings.Repeat("c", 40), "new title", nil); err != nil {
		t.Fatal(err)
	}
	pr, err := c.PR(ctx, "acme", "big", 7)
	if err != nil {
		t.Fatal(err)
	}
	if pr.HeadSHA != strings.Repeat("c", 40) || pr.Title != "new title" {
		t.Fatalf("after PushTitled: head %s, title %q", pr.HeadSHA, pr.Title)
	}
}
