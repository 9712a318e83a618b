package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/webhook"
)

// recorder is the Queue and Plans the receiver talks to, recording calls.
type recorder struct {
	mu       sync.Mutex
	plans    []jobs.Plan
	chats    []jobs.Chat
	commands []jobs.Command
	cancels  []jobs.PR
	insts    []string
	tiers    map[int64]jobs.Tier
	fail     error
	// disabled installations, by why (Disabled); instCancels the
	// installations whose runs were cancelled, with the repositories
	instCancels []string
	disabled    map[int64]string
	// threads are the threads prq answered in, beside 4242
	threads map[int64]bool
}

var (
	_ webhook.Queue = (*recorder)(nil)
	_ webhook.Plans = (*recorder)(nil)
)

func (r *recorder) Plan(_ context.Context, p jobs.Plan) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return false, r.fail
	}
	r.plans = append(r.plans, p)
	return true, nil
}

func (r *recorder) Command(_ context.Context, c jobs.Command) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return false, r.fail
	}
	for _, k := range r.commands {
		if k.CommentID == c.CommentID {
			return false, nil
		}
	}
	r.commands = append(r.commands, c)
	return true, nil
}

func (r *recorder) Chat(_ context.Context, c jobs.Chat) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return false, r.fail
	}
	r.chats = append(r.chats, c)
	return true, nil
}

func (r *recorder) Cancel(_ context.Context, pr jobs.PR) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancels = append(r.cancels, pr)
	return r.fail
}

func (r *recorder) CancelInstallation(_ context.Context, inst int64, repos []string) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.instCancels = append(r.instCancels, fmt.Sprintf("%d %v", inst, repos))
	return len(repos), r.fail
}

func (r *recorder) Tenant(_ context.Context, inst int64) (jobs.Tier, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return "", "", r.fail
	}
	if t, ok := r.tiers[inst]; ok {
		return t, r.disabled[inst], nil
	}
	return jobs.TierFree, r.disabled[inst], nil
}

func (r *recorder) SetInstallation(_ context.Context, inst int64, account string, accountID int64, action string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.insts = append(r.insts, action)
	return r.fail
}

func (r *recorder) SetAccountTier(_ context.Context, accountID int64, tier jobs.Tier, reason string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.insts = append(r.insts, "marketplace:"+string(tier))
	return r.fail
}

func (r *recorder) AppThread(_ context.Context, root int64) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return root == 4242 || r.threads[root], r.fail
}

func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.plans) + len(r.chats) + len(r.cancels) + len(r.insts)
}

var secret = []byte("It's a Secret to Everybody")

func newHandler(t testing.TB, rec *recorder) *webhook.Handler {
	t.Helper()
	h, err := webhook.New(webhook.Config{Secret: secret, AppSlug: "prq-bot", MaxBytes: 1 << 20, SkipBotPRs: true}, rec, rec, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func send(h http.Handler, event, delivery string, body []byte, mutate func(*http.Request)) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/webhook", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", delivery)
	req.Header.Set("X-Hub-Signature-256", webhook.Sign(secret, body))
	if mutate != nil {
		mutate(req)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestSignatureVector(t *testing.T) {
	t.Parallel()
	const want = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	if got := webhook.Sign([]byte("It's a Secret to Everybody"), []byte("Hello, World!")); got != want {
		t.Fatalf("sign = %s, want GitHub's test vector %s", got, want)
	}
	if err := webhook.VerifySignature(secret, []byte("Hello, World!"), want); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "sha1=abc", "sha256=", "sha256=zz", want[:len(want)-1] + "f"} {
		if err := webhook.VerifySignature(secret, []byte("Hello, World!"), bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	if err := webhook.VerifySignature(nil, nil, ""); err == nil {
		t.Error("empty secret and empty signature accepted (the go-github pitfall)")
	}
	if _, err := webhook.New(webhook.Config{}, &recorder{}, &recorder{}, nil); err == nil {
		t.Error("a receiver without a secret was built")
	}
}

func TestGeneratedEvents(t *testing.T) {
	t.Parallel()
	pr := traffic.PR{Installation: 7, Owner: "acme", Repo: "api", Number: 3, Head: strings.Repeat("a", 40), Base: strings.Repeat("b", 40)}
	botPR := pr
	botPR.Bot = true
	draft := pr
	draft.Draft = true
	noInst := pr
	noInst.Installation = 0
	c := traffic.Comment{Installation: 7, Owner: "acme", Repo: "api", Number: 3, ID: 11, Author: "dev", Body: "@prq-bot why?"}
	quiet := c
	quiet.Body = "looks good to me"
	similar := c
	similar.Body = "cc @prq-bottom"
	self := c
	self.Author = "prq-bot[bot]"
	inThread := quiet
	inThread.InReplyTo = 4242
	otherThread := quiet
	otherThread.InReplyTo = 77
	tests := []struct {
		name   string
		event  string
		body   []byte
		status int
		plans  int
		chats  int
		cancel int
	}{
		{"opened", "pull_request", traffic.PullRequestEvent("opened", pr), 202, 1, 0, 0},
		{"synchronize", "pull_request", traffic.PullRequestEvent("synchronize", pr), 202, 1, 0, 0},
		{"bot PR skipped", "pull_request", traffic.PullRequestEvent("opened", botPR), 200, 0, 0, 0},
		{"draft skipped", "pull_request", traffic.PullRequestEvent("opened", draft), 200, 0, 0, 0},
		{"closed cancels", "pull_request", traffic.PullRequestEvent("closed", pr), 200, 0, 0, 1},
		{"missing installation", "pull_request", traffic.PullRequestEvent("opened", noInst), 400, 0, 0, 0},
		{"chat", "issue_comment", traffic.IssueCommentEvent(c), 202, 0, 1, 0},
		{"diff chat", "pull_request_review_comment", traffic.ReviewCommentEvent(c), 202, 0, 1, 0},
		{"no mention", "issue_comment", traffic.IssueCommentEvent(quiet), 200, 0, 0, 0},
		{"similar handle", "issue_comment", traffic.IssueCommentEvent(similar), 200, 0, 0, 0},
		{"own comment", "issue_comment", traffic.IssueCommentEvent(self), 200, 0, 0, 0},
		{"reply in the App's thread", "pull_request_review_comment", traffic.ReviewCommentEvent(inThread), 202, 0, 1, 0},
		{"reply in another thread", "pull_request_review_comment", traffic.ReviewCommentEvent(otherThread), 200, 0, 0, 0},
		{"unknown event", "deployment_status", []byte(`{"action":"created"}`), 200, 0, 0, 0},
		{"event go-github does not know", "not_a_github_event", []byte(`{"action":"created"}`), 200, 0, 0, 0},
		{"malformed payload of a known event", "pull_request", []byte(`{"action":5}`), 400, 0, 0, 0},
		{"ping", "ping", []byte(`{"zen":"Keep it logically awesome."}`), 200, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{tiers: map[int64]jobs.Tier{7: jobs.TierPaid}}
			delivery := "d-" + strings.ReplaceAll(tt.name, " ", "-")
			w := send(newHandler(t, rec), tt.event, delivery, tt.body, nil)
			if w.Code != tt.status || len(rec.plans) != tt.plans || len(rec.chats) != tt.chats || len(rec.cancels) != tt.cancel {
				t.Fatalf("status %d plans %d chats %d cancels %d; want %d %d %d %d (%s)", w.Code, len(rec.plans), len(rec.chats), len(rec.cancels),
					tt.status, tt.plans, tt.chats, tt.cancel, w.Body.String())
			}
			if tt.plans == 1 && (rec.plans[0].Tier != jobs.TierPaid || rec.plans[0].Delivery != delivery) {
				t.Fatalf("plan %+v: want the installation's tier and the delivery id", rec.plans[0])
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	body := traffic.PullRequestEvent("opened", traffic.PR{Installation: 7, Owner: "a", Repo: "b", Number: 1, Head: "h"})
	tests := []struct {
		name   string
		body   []byte
		mutate func(*http.Request)
		status int
	}{
		{"wrong signature", body, func(r *http.Request) { r.Header.Set("X-Hub-Signature-256", webhook.Sign([]byte("other"), body)) }, 401},
		{"missing signature", body, func(r *http.Request) { r.Header.Del("X-Hub-Signature-256") }, 401},
		{"sha1 only", body, func(r *http.Request) {
			r.Header.Del("X-Hub-Signature-256")
			r.Header.Set("X-Hub-Signature", "sha1=0000000000000000000000000000000000000000")
		}, 401},
		{"truncated body", body[:len(body)/2], func(r *http.Request) { r.Header.Set("X-Hub-Signature-256", webhook.Sign(secret, body)) }, 401},
		{"truncated but signed", body[:len(body)/2], nil, 400},
		{"oversized", bytes.Repeat([]byte("x"), 2<<20), nil, 413},
		{"missing event", body, func(r *http.Request) { r.Header.Del("X-GitHub-Event") }, 400},
		{"missing delivery", body, func(r *http.Request) { r.Header.Del("X-GitHub-Delivery") }, 400},
		{"wrong content type", body, func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }, 415},
		{"invalid utf-8", []byte("{\"action\":\"opened\xff\"}"), nil, 400},
		{"deeply nested", []byte(strings.Repeat("[", 20000) + strings.Repeat("]", 20000)), nil, 400},
		{"negative number", []byte(`{"action":"opened","number":-4,"installation":{"id":7},"repository":{"name":"b","owner":{"login":"a"}},"pull_request":{"head":{"sha":"h"}}}`), nil, 400},
		{"GET", body, func(r *http.Request) { r.Method = http.MethodGet }, 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			w := send(newHandler(t, rec), "pull_request", "d1", tt.body, tt.mutate)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.status, w.Body.String())
			}
			if rec.total() != 0 {
				t.Fatal("something was enqueued for a refused delivery")
			}
		})
	}
}

func TestUnavailableIsNever2xx(t *testing.T) {
	t.Parallel()
	rec := &recorder{fail: errors.New("redis: connection refused")}
	body := traffic.PullRequestEvent("opened", traffic.PR{Installation: 7, Owner: "a", Repo: "b", Number: 1, Head: "h"})
	if w := send(newHandler(t, rec), "pull_request", "d1", body, nil); w.Code != 503 {
		t.Fatalf("status %d while Redis is down, want 503", w.Code)
	}
}

func TestFormEncodedPayload(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	js := traffic.PullRequestEvent("opened", traffic.PR{Installation: 7, Owner: "a", Repo: "b", Number: 1, Head: "h"})
	form := []byte("payload=" + urlQueryEscape(string(js)))
	w := send(newHandler(t, rec), "pull_request", "d1", form, func(r *http.Request) { r.Header.Set("Content-Type", "application/x-www-form-urlencoded") })
	if w.Code != 202 || len(rec.plans) != 1 {
		t.Fatalf("form payload: %d %s", w.Code, w.Body.String())
	}
}

// TestFixtures replays GitHub's own example payloads with valid
// signatures; each yields the job its event and action call for, or none.
func TestFixtures(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "..", "shared", "fixtures", "github-webhooks")
	if _, err := os.Stat(dir); err != nil {
		t.Skip("../shared/fixtures/github-webhooks not present: skipping the replay of GitHub's example payloads")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*.json"))
	if len(files) < 50 {
		t.Fatalf("only %d fixtures found", len(files))
	}
	for _, f := range files {
		event := filepath.Base(filepath.Dir(f))
		name := event + "/" + filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var p map[string]any
			json.Unmarshal(body, &p)
			action, _ := p["action"].(string)
			_, hasInst := p["installation"].(map[string]any)
			status, plans, chats, cancels := 200, 0, 0, 0
			switch event {
			case "pull_request":
				pr := p["pull_request"].(map[string]any)
				draft, _ := pr["draft"].(bool)
				switch action {
				case "opened", "reopened", "ready_for_review", "synchronize":
					switch {
					case !hasInst:
						status = 400
					case !draft && pr["state"] == "open":
						status, plans = 202, 1
					}
				case "converted_to_draft", "closed":
					if hasInst {
						cancels = 1
					} else {
						status = 400
					}
				}
			}
			rec := &recorder{}
			w := send(newHandler(t, rec), event, "fixture-delivery", body, nil)
			if w.Code != status || len(rec.plans) != plans || len(rec.chats) != chats || len(rec.cancels) != cancels {
				t.Fatalf("status %d plans %d chats %d cancels %d; want %d %d %d %d: %s",
					w.Code, len(rec.plans), len(rec.chats), len(rec.cancels), status, plans, chats, cancels, w.Body.String())
			}
			// with a wrong signature: 401 and nothing
			rec2 := &recorder{}
			w = send(newHandler(t, rec2), event, "fixture-delivery", body, func(r *http.Request) { r.Header.Set("X-Hub-Signature-256", webhook.Sign([]byte("wrong"), body)) })
			if w.Code != 401 || rec2.total() != 0 {
				t.Fatalf("wrong signature: %d, %d calls", w.Code, rec2.total())
			}
		})
	}
	// The issue_comment fixtures are on plain issues; as a PR comment that
	// mentions the App, one becomes a chat job.
	body, err := os.ReadFile(filepath.Join(dir, "issue_comment", "created.with-installation.payload.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	json.Unmarshal(body, &p)
	p["issue"].(map[string]any)["pull_request"] = map[string]any{"url": "https://api.github.com/repos/x/y/pulls/1"}
	p["comment"].(map[string]any)["body"] = "@prq-bot what does this do?"
	body, _ = json.Marshal(p)
	rec := &recorder{}
	if w := send(newHandler(t, rec), "issue_comment", "d-chat", body, nil); w.Code != 202 || len(rec.chats) != 1 {
		t.Fatalf("PR chat from a fixture: %d %d", w.Code, len(rec.chats))
	}
}

func FuzzVerifySignature(f *testing.F) {
	f.Add([]byte("Hello, World!"), "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
	f.Add([]byte(""), "")
	f.Add([]byte("x"), "sha1=00")
	f.Fuzz(func(t *testing.T, body []byte, sig string) {
		err := webhook.VerifySignature(secret, body, sig)
		if err == nil && !strings.EqualFold(sig, webhook.Sign(secret, body)) {
			t.Fatalf("accepted a signature that is not the body's: %q", sig)
		}
	})
}

func FuzzParseEvent(f *testing.F) {
	f.Add("pull_request", []byte(traffic.PullRequestEvent("opened", traffic.PR{Installation: 1, Owner: "a", Repo: "b", Number: 1, Head: "h"})))
	f.Add("issue_comment", []byte(traffic.IssueCommentEvent(traffic.Comment{Installation: 1, Owner: "a", Repo: "b", Number: 1, ID: 2, Body: "@prq-bot hi"})))
	f.Add("installation", []byte(`{"action":"created","installation":{"id":1,"account":{"login":"x","id":2}}}`))
	f.Add("marketplace_purchase", []byte(`{"action":"purchased","marketplace_purchase":{"account":{"id":3},"plan":{"monthly_price_in_cents":900}}}`))
	f.Fuzz(func(t *testing.T, event string, body []byte) {
		rec := &recorder{}
		h := newHandler(t, rec)
		w := send(h, event, "fuzz-delivery", body, nil)
		switch {
		case w.Code == 200 || w.Code == 202:
		case w.Code >= 400 && w.Code < 500:
			if rec.total() != 0 {
				t.Fatalf("a %d enqueued work", w.Code)
			}
		default:
			t.Fatalf("status %d for event %q", w.Code, event)
		}
	})
}
