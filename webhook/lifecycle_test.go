package webhook_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/jobs"
)

// TestInstallationLifeCycle: uninstalling or suspending the App, or
// removing repositories from it, cancels the installation's runs (or
// those of the repositories); its pull requests and comments enqueue
// nothing while it is disabled (outcome "installation disabled"); a base
// change replans, a title edit does not.
func TestInstallationLifeCycle(t *testing.T) {
	t.Parallel()
	inst := func(action string) []byte {
		b, _ := json.Marshal(map[string]any{"action": action, "installation": map[string]any{"id": 7, "account": map[string]any{"login": "acme", "id": 70}}})
		return b
	}
	removed, _ := json.Marshal(map[string]any{"action": "removed", "installation": map[string]any{"id": 7, "account": map[string]any{"login": "acme", "id": 70}},
		"repository_selection": "selected", "repositories_added": []any{}, "repositories_removed": []any{map[string]any{"id": 1, "name": "api", "full_name": "acme/api"}}})
	pr := traffic.PR{Installation: 7, Owner: "acme", Repo: "api", Number: 3, Head: strings.Repeat("a", 40), Base: strings.Repeat("b", 40)}
	edited := func(changes map[string]any) []byte {
		var p map[string]any
		json.Unmarshal(traffic.PullRequestEvent("edited", pr), &p)
		p["changes"] = changes
		b, _ := json.Marshal(p)
		return b
	}
	chat := traffic.IssueCommentEvent(traffic.Comment{Installation: 7, Owner: "acme", Repo: "api", Number: 3, ID: 11, Author: "dev", Body: "@prq-bot why?"})
	tests := []struct {
		name        string
		event       string
		body        []byte
		disabled    string
		status      int
		outcome     string
		instCancels []string
		plans       int
		chats       int
	}{
		{"uninstalled: runs cancelled", "installation", inst("deleted"), "", 200, "cancelled", []string{"7 []"}, 0, 0},
		{"suspended: runs cancelled", "installation", inst("suspend"), "", 200, "cancelled", []string{"7 []"}, 0, 0},
		{"unsuspended: recorded", "installation", inst("unsuspend"), "", 200, "recorded", nil, 0, 0},
		{"created: recorded", "installation", inst("created"), "", 200, "recorded", nil, 0, 0},
		{"repositories removed: their runs cancelled", "installation_repositories", removed, "", 200, "cancelled", []string{"7 [api]"}, 0, 0},
		{"opened while uninstalled: nothing", "pull_request", traffic.PullRequestEvent("opened", pr), "deleted", 200, "installation disabled", nil, 0, 0},
		{"synchronize while suspended: nothing", "pull_request", traffic.PullRequestEvent("synchronize", pr), "suspended", 200, "installation disabled", nil, 0, 0},
		{"chat while its token is refused: nothing", "issue_comment", chat, "token_refused", 200, "installation disabled", nil, 0, 0},
		{"base changed: replanned", "pull_request", edited(map[string]any{"base": map[string]any{"ref": map[string]any{"from": "dev"}, "sha": map[string]any{"from": strings.Repeat("c", 40)}}}), "", 202, "enqueued", nil, 1, 0},
		{"title edited: nothing", "pull_request", edited(map[string]any{"title": map[string]any{"from": "old"}}), "", 200, "ignored", nil, 0, 0},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{disabled: map[int64]string{7: tt.disabled}}
			w := send(newHandler(t, rec), tt.event, fmt.Sprintf("d-%d", i), tt.body, nil)
			var got struct{ Result string }
			json.Unmarshal(w.Body.Bytes(), &got)
			if w.Code != tt.status || got.Result != tt.outcome || len(rec.plans) != tt.plans || len(rec.chats) != tt.chats ||
				strings.Join(rec.instCancels, ",") != strings.Join(tt.instCancels, ",") {
				t.Fatalf("%s: status %d %q plans %d chats %d installation cancels %q; want %d %q %d %d %q", w.Body.String(), w.Code, got.Result, len(rec.plans), len(rec.chats), rec.instCancels,
					tt.status, tt.outcome, tt.plans, tt.chats, tt.instCancels)
			}
			if tt.plans == 1 && (rec.plans[0].Action != "edited" || rec.plans[0].Tier != jobs.TierFree) {
				t.Errorf("plan %+v", rec.plans[0])
			}
		})
	}
}
