package webhook_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/webhook"
)

// printQueue is the Queue of the example: it prints the task each event
// becomes (prq's enqueuer turns a jobs.Plan into a pr:plan asynq task).
type printQueue struct{}

func (printQueue) Plan(_ context.Context, p jobs.Plan) (bool, error) {
	fmt.Printf("enqueued %s for %s at %.7s (tier %s, action %s)\n", jobs.TypePlan, p.PR, p.HeadSHA, p.Tier, p.Action)
	return true, nil
}

func (printQueue) Chat(_ context.Context, c jobs.Chat) (bool, error) {
	fmt.Printf("enqueued %s for %s\n", jobs.TypeChat, c.PR)
	return true, nil
}

func (printQueue) Command(_ context.Context, c jobs.Command) (bool, error) {
	fmt.Printf("enqueued %s %q for %s\n", jobs.TypeCommand, c.Name, c.PR)
	return true, nil
}

func (printQueue) Cancel(_ context.Context, pr jobs.PR) error {
	fmt.Printf("cancelled %s\n", pr)
	return nil
}

func (printQueue) CancelInstallation(_ context.Context, inst int64, repos []string) (int, error) {
	fmt.Printf("cancelled installation %d's runs\n", inst)
	return 0, nil
}

// paidPlans puts every installation on the paid tier.
type paidPlans struct{}

func (paidPlans) Tenant(context.Context, int64) (jobs.Tier, string, error) {
	return jobs.TierPaid, "", nil
}
func (paidPlans) SetInstallation(context.Context, int64, string, int64, string) error {
	return nil
}
func (paidPlans) SetAccountTier(context.Context, int64, jobs.Tier, string) error { return nil }
func (paidPlans) AppThread(context.Context, int64) (bool, error)                 { return false, nil }

var (
	_ webhook.Queue = printQueue{}
	_ webhook.Plans = paidPlans{}
)

// A signed pull_request delivery becomes a plan; a bad signature is
// refused before anything is parsed.
func ExampleHandler() {
	secret := []byte("webhook secret")
	h, err := webhook.New(webhook.Config{Secret: secret, AppSlug: "prq-bot"}, printQueue{}, paidPlans{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	body := traffic.PullRequestEvent("opened", traffic.PR{Installation: 7, Owner: "acme", Repo: "api", Number: 3,
		Head: strings.Repeat("a", 40), Base: strings.Repeat("b", 40)})
	post := func(signature string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/webhook", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "pull_request")
		req.Header.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
		req.Header.Set("X-Hub-Signature-256", signature)
		resp, err := srv.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		reply, _ := io.ReadAll(resp.Body)
		fmt.Printf("%d %s", resp.StatusCode, reply)
	}
	post(webhook.Sign(secret, body))
	post(webhook.Sign([]byte("another secret"), body))
	srv.Client().CloseIdleConnections()
	// Output:
	// enqueued pr:plan for acme/api#3 at aaaaaaa (tier paid, action opened)
	// 202 {"result":"enqueued"}
	// 401 {"error":"webhook: signature does not match","result":"bad signature"}
}
