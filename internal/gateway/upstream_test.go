package gateway_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/gateway"
)

// closedURL is the URL of a port nothing listens on (connection refused).
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/v1"
}

// TestNotSentSettlesNothing: a call that never reached the provider (the
// connection refused) answers 502 and gives everything back: the key's
// quota, its tpm and the model's bucket (whose period is a day here, so
// it does not refill during the test).
func TestNotSentSettlesNothing(t *testing.T) {
	t.Parallel()
	r := newRigWith(t, rigOpts{upstream: closedURL(t), period: 24 * time.Hour})
	secret, k := r.key(t, gateway.Spec{Name: "unreached", Tier: "paid", QuotaTokens: 10000, TPM: 5000})
	full := r.bucketTokens(t)
	for _, stream := range []bool{false, true} {
		res, err := r.post(context.Background(), secret, fmt.Sprintf(`{"model":%q,"stream":%v,"max_tokens":500,"messages":[{"role":"user","content":"hello"}]}`, r.model, stream), nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusBadGateway {
			t.Fatalf("stream %v: %d, want 502", stream, res.StatusCode)
		}
	}
	if got := r.used(t, k); got != 0 {
		t.Fatalf("quota used %d by calls that never reached the provider", got)
	}
	if got := r.bucketTokens(t); got != full {
		t.Fatalf("bucket %d of %d after calls that never reached the provider", got, full)
	}
	// the key's tpm was given back: a request of most of it passes its check
	res, err := r.post(context.Background(), secret, fmt.Sprintf(`{"model":%q,"max_tokens":4500,"messages":[{"role":"user","content":"hello"}]}`, r.model), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("%d, want 502 (past the key's tpm, to the unreachable provider)", res.StatusCode)
	}
}
