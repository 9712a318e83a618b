package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prq-dev/prq/internal/gateway"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
)

func TestKeysLifecycle(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	ks := gateway.NewKeys(rdb)
	secret, k, err := ks.Create(ctx, gateway.Spec{Name: "triage-bot", Tier: "chat", QuotaTokens: 5000, QuotaPeriod: ratelimit.Week, TPM: 900, Models: []string{"gpt-4o-mini"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, gateway.KeyPrefix) || len(secret) < 40 || k.Hash != "" || len(k.ID) != 12 {
		t.Fatalf("created %q %+v: want a long prq-sk- secret, a 12-digit id, no hash in the record", secret, k)
	}
	got, err := ks.Authenticate(ctx, secret)
	if err != nil || got.ID != k.ID || got.Tier != "chat" || got.QuotaTokens != 5000 || got.QuotaPeriod != ratelimit.Week || !got.Allows("gpt-4o-mini") || got.Allows("gpt-4o") {
		t.Fatalf("authenticate: %+v %v", got, err)
	}
	if _, err := ks.Authenticate(ctx, secret+"x"); !errors.Is(err, gateway.ErrUnknownKey) {
		t.Fatalf("a wrong secret: %v, want ErrUnknownKey", err)
	}
	// nothing in Redis holds the secret itself
	keys, _ := rdb.Keys(ctx, "{prq:gw}*").Result()
	for _, name := range keys {
		v, _ := rdb.Get(ctx, name).Result()
		if strings.Contains(name+v, secret) {
			t.Fatalf("the secret is stored in %s", name)
		}
	}
	rotated, _, err := ks.Rotate(ctx, k.ID)
	if err != nil || rotated == secret {
		t.Fatalf("rotate: %v", err)
	}
	if _, err := ks.Authenticate(ctx, secret); !errors.Is(err, gateway.ErrUnknownKey) {
		t.Fatalf("the old secret after rotation: %v, want ErrUnknownKey", err)
	}
	if got, err := ks.Authenticate(ctx, rotated); err != nil || got.ID != k.ID {
		t.Fatalf("the new secret: %+v %v; want the same id", got, err)
	}
	if _, err := ks.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Authenticate(ctx, rotated); !errors.Is(err, gateway.ErrRevoked) {
		t.Fatalf("a revoked key: %v, want ErrRevoked", err)
	}
	if _, _, err := ks.Rotate(ctx, k.ID); !errors.Is(err, gateway.ErrRevoked) {
		t.Fatalf("rotating a revoked key: %v, want ErrRevoked", err)
	}
	if _, err := ks.Revoke(ctx, "nope"); !errors.Is(err, gateway.ErrUnknownKey) {
		t.Fatalf("revoking an unknown id: %v", err)
	}
	list, err := ks.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range list {
		if l.ID == k.ID {
			found = true
			if l.Revoked.IsZero() || l.Rotated.IsZero() || l.Hash != "" {
				t.Fatalf("listed %+v: want revoked and rotated, no hash", l)
			}
		}
	}
	if !found {
		t.Fatal("the key is not listed")
	}
}

func TestSpecValidation(t *testing.T) {
	t.Parallel()
	ks := gateway.NewKeys(redistest.Shared(t).Client(t))
	tests := []struct {
		name string
		spec gateway.Spec
		// names is what the error names: the flag and the API's field
		names []string
	}{
		{"no name", gateway.Spec{Tier: "paid"}, nil},
		{"unknown tier", gateway.Spec{Name: "a", Tier: "gold"}, nil},
		{"negative quota", gateway.Spec{Name: "a", QuotaTokens: -1}, []string{"--quota-tokens", "quota_tokens"}},
		{"negative tpm", gateway.Spec{Name: "a", TPM: -5}, []string{"--tpm"}},
		{"unknown period", gateway.Spec{Name: "a", QuotaPeriod: "fortnight"}, nil},
		{"empty model", gateway.Spec{Name: "a", Models: []string{" "}}, nil},
		{"tpm past the bucket's arithmetic", gateway.Spec{Name: "a", TPM: 100000000000}, []string{"--tpm"}},
		{"quota past exact doubles", gateway.Spec{Name: "a", QuotaTokens: 9223372036854775807}, []string{"--quota-tokens", "quota_tokens"}},
		{"negative dollars", gateway.Spec{Name: "a", QuotaDollars: -0.01}, []string{"--quota-dollars", "quota_dollars"}},
		{"dollars not a number", gateway.Spec{Name: "a", QuotaDollars: math.NaN()}, []string{"--quota-dollars", "quota_dollars", "NaN"}},
		{"infinite dollars", gateway.Spec{Name: "a", QuotaDollars: math.Inf(1)}, []string{"--quota-dollars", "quota_dollars"}},
		{"dollars past a million", gateway.Spec{Name: "a", QuotaDollars: 1e6 + 1}, []string{"--quota-dollars", "quota_dollars", "1000000"}},
		{"dollars beside a bad period", gateway.Spec{Name: "a", QuotaDollars: 5, QuotaPeriod: "fortnight"}, []string{"fortnight"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ks.Create(context.Background(), tt.spec)
			if !errors.Is(err, gateway.ErrInvalidSpec) {
				t.Fatalf("err %v, want ErrInvalidSpec", err)
			}
			for _, name := range tt.names {
				if !strings.Contains(err.Error(), name) {
					t.Fatalf("%v does not name %s", err, name)
				}
			}
		})
	}
	// the bounds themselves are taken
	for _, d := range []float64{0, 0.000001, gateway.MaxQuotaDollars} {
		if _, k, err := ks.Create(context.Background(), gateway.Spec{Name: "a", QuotaDollars: d}); err != nil || k.QuotaDollars != d {
			t.Errorf("quota_dollars %v: %+v %v", d, k, err)
		}
	}
}

func TestKeysAPI(t *testing.T) {
	t.Parallel()
	ks := gateway.NewKeys(redistest.Shared(t).Client(t))
	srv := httptest.NewServer(gateway.KeysAPI(ks, []string{"gpt-4o", "gpt-4o-mini"}))
	defer srv.Close()
	do := func(method, path, body string) (int, map[string]json.RawMessage, string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var raw json.RawMessage
		json.NewDecoder(res.Body).Decode(&raw)
		var m map[string]json.RawMessage
		json.Unmarshal(raw, &m)
		return res.StatusCode, m, string(raw)
	}
	code, m, _ := do("POST", "/api/keys", `{"name":"docs-bot","tier":"paid","quota_tokens":1000,"quota_period":"hour"}`)
	var secret string
	var rec gateway.Key
	json.Unmarshal(m["key"], &secret)
	json.Unmarshal(m["record"], &rec)
	if code != http.StatusCreated || !strings.HasPrefix(secret, gateway.KeyPrefix) || rec.ID == "" {
		t.Fatalf("create: %d %v", code, m)
	}
	if code, _, body := do("GET", "/api/keys", ""); code != 200 || !strings.Contains(body, rec.ID) || !strings.Contains(body, `"quota_used": 0`) ||
		!strings.Contains(body, `"quota_dollars": 0`) || !strings.Contains(body, `"used_dollars": 0`) || strings.Contains(body, secret) || strings.Contains(body, `"hash"`) {
		t.Fatalf("list: %d %s", code, body)
	}
	code, m, _ = do("POST", "/api/keys", `{"name":"dollar-bot","tier":"paid","quota_dollars":2.5,"quota_period":"month"}`)
	var drec gateway.Key
	json.Unmarshal(m["record"], &drec)
	if code != http.StatusCreated || drec.QuotaDollars != 2.5 || drec.QuotaTokens != 0 || drec.QuotaPeriod != "month" {
		t.Fatalf("create with quota_dollars: %d %v", code, m)
	}
	for _, body := range []string{`{"name":"x","quota_dollars":-1}`, `{"name":"x","quota_dollars":1e7}`} {
		req, _ := http.NewRequest("POST", srv.URL+"/api/keys", strings.NewReader(body))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), "quota_dollars") {
			t.Errorf("%s: %d %s, want 400 naming quota_dollars", body, res.StatusCode, msg)
		}
	}
	if code, m, _ := do("POST", "/api/keys/"+rec.ID+"/rotate", ""); code != 200 || len(m["key"]) == 0 {
		t.Fatalf("rotate: %d %v", code, m)
	}
	if code, _, _ := do("POST", "/api/keys/"+rec.ID+"/revoke", ""); code != 200 {
		t.Fatalf("revoke: %d", code)
	}
	for _, tt := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/api/keys/" + rec.ID + "/rotate", "", http.StatusConflict},
		{"POST", "/api/keys/unknown/revoke", "", http.StatusNotFound},
		{"POST", "/api/keys", `{"name":"x","tier":"gold"}`, http.StatusBadRequest},
		{"POST", "/api/keys", `not json`, http.StatusBadRequest},
		{"POST", "/api/keys", `{"name":"typo-bot","tier":"paid","models":["gpt-4o-mni"]}`, http.StatusBadRequest},
		{"POST", "/api/keys", `{"name":"dollar-bot","tier":"paid"}`, http.StatusBadRequest},                     // a live key has the name
		{"POST", "/api/keys", `{"name":"docs-bot","tier":"paid","models":["gpt-4o-mini"]}`, http.StatusCreated}, // its key was revoked
	} {
		if code, _, body := do(tt.method, tt.path, tt.body); code != tt.want {
			t.Errorf("%s %s: %d %s, want %d", tt.method, tt.path, code, body, tt.want)
		}
	}
}

// TestKeyLimitsBounded: a key with the largest limits the spec takes is
// served (the limiters hold them); a stored record past them (written
// before they were checked) is refused with a 403 that says why, not the
// 503 every request of such a key got.
func TestKeyLimitsBounded(t *testing.T) {
	t.Parallel()
	r := newRigWith(t, rigOpts{cfg: withPrices(llm.Prices{Input: 0.15, Output: 0.6})})
	ctx := context.Background()
	secret, k := r.key(t, gateway.Spec{Name: "max", Tier: "paid", QuotaTokens: gateway.MaxQuotaTokens, QuotaDollars: gateway.MaxQuotaDollars, TPM: gateway.MaxTPM})
	body := `{"model":"` + r.model + `","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`
	res, err := r.post(ctx, secret, body, nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("a key at the largest limits: %d", res.StatusCode)
	}
	for _, tt := range []struct{ field, value string }{{"tpm", "100000000000"}, {"quota_tokens", "9223372036854775807"}, {"quota_dollars", "1e9"}, {"quota_dollars", "-1"}} {
		raw, err := r.rdb.Get(ctx, "{prq:gw}:key:"+k.ID).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		var rec map[string]any
		json.Unmarshal(raw, &rec)
		orig := rec[tt.field]
		rec[tt.field] = json.RawMessage(tt.value)
		raw, _ = json.Marshal(rec)
		if err := r.rdb.Set(ctx, "{prq:gw}:key:"+k.ID, raw, 0).Err(); err != nil {
			t.Fatal(err)
		}
		res, err := r.post(ctx, secret, body, nil)
		if err != nil {
			t.Fatal(err)
		}
		var e apiErr
		jsonDecode(res, &e)
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden || e.Error.Code == nil || *e.Error.Code != "invalid_key_record" || !strings.Contains(e.Error.Message, tt.field) {
			t.Fatalf("%s %s stored: %d %+v, want 403 invalid_key_record naming it", tt.field, tt.value, res.StatusCode, e)
		}
		rec[tt.field] = orig
		raw, _ = json.Marshal(rec)
		r.rdb.Set(ctx, "{prq:gw}:key:"+k.ID, raw, 0)
	}
}

// TestCreateUnique: of concurrent creates of one name exactly one wins;
// a revoked key frees its name; Resolve takes an id or a unique name and
// refuses a name several keys (made through Create) share.
func TestCreateUnique(t *testing.T) {
	ctx := context.Background()
	ks := gateway.NewKeys(redistest.New(t).Client(t))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var won []string
	var refused int
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, k, err := ks.CreateUnique(ctx, gateway.Spec{Name: "ci"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, k.ID)
			case errors.Is(err, gateway.ErrInvalidSpec) && strings.Contains(err.Error(), `a key named "ci" exists`):
				refused++
			default:
				t.Errorf("create: %v", err)
			}
		}()
	}
	wg.Wait()
	if len(won) != 1 || refused != 7 {
		t.Fatalf("%d created, %d refused; want 1 and 7", len(won), refused)
	}
	if id, err := ks.Resolve(ctx, "ci"); err != nil || id != won[0] {
		t.Fatalf("Resolve(ci) = %q, %v; want %s", id, err, won[0])
	}
	if id, err := ks.Resolve(ctx, won[0]); err != nil || id != won[0] {
		t.Fatalf("Resolve(id) = %q, %v", id, err)
	}
	if _, err := ks.Revoke(ctx, won[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Resolve(ctx, "ci"); !errors.Is(err, gateway.ErrUnknownKey) {
		t.Fatalf("Resolve of a revoked key's name: %v", err)
	}
	if _, _, err := ks.CreateUnique(ctx, gateway.Spec{Name: "ci"}); err != nil {
		t.Fatalf("the name after its key's revocation: %v", err)
	}
	if _, _, err := ks.Create(ctx, gateway.Spec{Name: "ci"}); err != nil { // the admin API's way: no check
		t.Fatal(err)
	}
	if _, err := ks.Resolve(ctx, "ci"); !errors.Is(err, gateway.ErrUnknownKey) || !strings.Contains(err.Error(), "2 keys not revoked have that name") {
		t.Fatalf("Resolve of a shared name: %v", err)
	}
}
