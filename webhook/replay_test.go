package webhook_test

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/webhook"
)

// TestReplayUnderNewDeliveryID: a captured signed delivery sent again
// under a new X-GitHub-Delivery enqueues no second plan (200 duplicate);
// one that was not saved can be taken again; one whose own time is older
// than the window is stale.
func TestReplayUnderNewDeliveryID(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	rec := &recorder{}
	st := store.New(redistest.Shared(t).Client(t), jobs.TierFree)
	h, err := webhook.New(webhook.Config{Secret: secret, Replays: st, NowFunc: func() time.Time { return now }}, rec, rec,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	inst := time.Now().UnixNano()%1e9 + 1 // keys of its own in the shared Redis
	body := traffic.PullRequestEvent("opened", traffic.PR{Installation: inst, Owner: "a", Repo: "b", Number: 1, Head: "h1"})
	for i, tc := range []struct {
		delivery string
		code     int
		result   string
		plans    int
	}{
		{"d-1", http.StatusAccepted, "enqueued", 1},
		{"d-replay", http.StatusOK, "duplicate", 1},
		{"d-replay-2", http.StatusOK, "duplicate", 1},
		{"d-1", http.StatusAccepted, "enqueued", 2}, // GitHub's redelivery keeps the id: the queue's task id dedupes it
	} {
		w := send(h, "pull_request", tc.delivery, body, nil)
		if w.Code != tc.code || !strings.Contains(w.Body.String(), `"`+tc.result+`"`) || len(rec.plans) != tc.plans {
			t.Fatalf("step %d (%s): %d %s with %d plans, want %d %s with %d", i, tc.delivery, w.Code, w.Body, len(rec.plans), tc.code, tc.result, tc.plans)
		}
	}

	// Not saved: the body stays takeable, under any id.
	other := traffic.PullRequestEvent("opened", traffic.PR{Installation: inst, Owner: "a", Repo: "b", Number: 2, Head: "h2"})
	rec.fail = errors.New("redis down")
	if w := send(h, "pull_request", "d-2", other, nil); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("unsaved delivery: %d %s, want 503", w.Code, w.Body)
	}
	rec.fail = nil
	if w := send(h, "pull_request", "d-2-again", other, nil); w.Code != http.StatusAccepted {
		t.Fatalf("a delivery not saved before, sent again: %d %s, want 202", w.Code, w.Body)
	}

	// Older than the window by its own time: stale, whatever the id.
	third := traffic.PullRequestEvent("opened", traffic.PR{Installation: inst, Owner: "a", Repo: "b", Number: 3, Head: "h3"})
	old, fresh := stamped(t, third, now.Add(-73*time.Hour)), stamped(t, third, now.Add(-time.Minute))
	plans := len(rec.plans)
	if w := send(h, "pull_request", "d-old", old, nil); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"stale"`) || len(rec.plans) != plans {
		t.Fatalf("delivery 73h old: %d %s, %d new plans; want 200 stale and none", w.Code, w.Body, len(rec.plans)-plans)
	}
	if w := send(h, "pull_request", "d-fresh", fresh, nil); w.Code != http.StatusAccepted {
		t.Fatalf("delivery a minute old: %d %s, want 202", w.Code, w.Body)
	}
}

// stamped returns a pull_request payload with its updated_at set to at.
func stamped(t *testing.T, payload []byte, at time.Time) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(payload, &m); err != nil {
		t.Fatal(err)
	}
	m["pull_request"].(map[string]any)["updated_at"] = at.Format(time.RFC3339)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
