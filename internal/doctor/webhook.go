package doctor

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// CheckWebhook signs a ping delivery with the secret and, when a serve
// URL is given, POSTs it to serve's /webhook: 2xx means serve holds the
// same secret, 401 that it does not.
func CheckWebhook(ctx context.Context, client *http.Client, wh Webhook) Result {
	r := Result{Name: "webhook secret"}
	if len(wh.Secret) == 0 && wh.ServeURL == "" {
		r.OK, r.Detail = true, "not set: workers do not need it; serve refuses to start without it"
		return r
	}
	if len(wh.Secret) == 0 {
		r.Detail = "GITHUB_WEBHOOK_SECRET is not set here, so no ping can be signed for serve"
		r.Fix = "set GITHUB_WEBHOOK_SECRET to the secret entered in the App's settings (General → Webhook secret)"
		return r
	}
	if wh.ServeURL == "" {
		r.OK, r.Detail = true, fmt.Sprintf("set (%d bytes); not verified against serve: give --url to send it a signed ping", len(wh.Secret))
		return r
	}
	id := make([]byte, 8)
	rand.Read(id)
	delivery := "doctor-" + hex.EncodeToString(id)
	body := []byte(`{"zen":"Keep it logically awesome.","hook_id":0,"hook":{"type":"App","events":[]}}`)
	mac := hmac.New(sha256.New, wh.Secret)
	mac.Write(body)
	u := strings.TrimSuffix(wh.ServeURL, "/") + "/webhook"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		r.Detail, r.Fix = fmt.Sprintf("bad serve URL %q", wh.ServeURL), "give serve's base URL, for example --url http://127.0.0.1:8080"
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/prq-doctor")
	req.Header.Set("X-GitHub-Event", "ping")
	req.Header.Set("X-GitHub-Delivery", delivery)
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := client.Do(req)
	if err != nil {
		r.Detail, r.Fix = "POST "+u+": "+scrubURLError(err).Error(), "start serve (prq serve) or point --url at it"
		return r
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		r.OK, r.Detail = true, fmt.Sprintf("serve accepted a signed ping (%d): the secrets match", resp.StatusCode)
	case resp.StatusCode == http.StatusUnauthorized:
		r.Detail = "serve refused a ping signed with this GITHUB_WEBHOOK_SECRET (401): the secrets do not match"
		r.Fix = "give serve and this doctor the same GITHUB_WEBHOOK_SECRET, equal to the App's webhook secret (see docs/operations.md#rotating-secrets-without-losing-deliveries)"
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		r.Detail = fmt.Sprintf("POST %s answered %d: serve has no webhook route", u, resp.StatusCode)
		r.Fix = "serve mounts /webhook only with GITHUB_WEBHOOK_SECRET set: set it in serve's environment"
	default:
		r.Detail = fmt.Sprintf("POST %s answered %d %s", u, resp.StatusCode, oneLine(answer))
		r.Fix = "see serve's log for the delivery " + delivery
	}
	return r
}
