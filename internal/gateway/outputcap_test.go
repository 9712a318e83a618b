package gateway_test

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/prq-dev/prq/internal/gateway"
	"github.com/prq-dev/prq/llmcall"
)

// TestOutputCapOfARequestThatSetsNone: a request without max_tokens is
// given the model's max_output_tokens when it is configured, and
// ratelimit.DefaultMaxOutput (4096) when it is not; the provider is
// charged for that cap, as the reference (models[].max_output_tokens)
// says.
func TestOutputCapOfARequestThatSetsNone(t *testing.T) {
	for _, tc := range []struct {
		name      string
		maxOutput int64
		lo, hi    int64 // the provider's charge: input + the cap
	}{
		{"unset", 0, 4096, 4096 + 200},
		{"configured", 300, 300, 300 + 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRigWith(t, rigOpts{cfg: func(c *gateway.Config) {
				for name := range c.Models {
					c.Models[name] = gateway.Model{Model: llmcall.Model{MaxOutput: tc.maxOutput}}
				}
			}})
			secret, _ := r.key(t, gateway.Spec{Name: "agent"})
			res, err := r.post(context.Background(), secret, `{"model":"`+r.model+`","messages":[{"role":"user","content":"hello"}]}`, nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", res.StatusCode, body)
			}
			adm := r.fake.Admissions(r.model)
			if len(adm) != 1 {
				t.Fatalf("%d admissions at the provider, want 1", len(adm))
			}
			if c := adm[0].Cost; c < tc.lo || c > tc.hi {
				t.Errorf("the provider charged %d tokens, want input + a %d-token cap (%d to %d)", c, tc.lo, tc.lo, tc.hi)
			}
		})
	}
}
