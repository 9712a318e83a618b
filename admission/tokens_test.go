package admission_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// Tokens reads the same counters as Stats, alone: after tickets of every
// class came and some were admitted, the two agree and are not zero.
func TestTokensAgreeWithStats(t *testing.T) {
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	b, err := ratelimit.NewBucket(rdb, "tok", "sk", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 1000, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s, err := admission.New(rdb, map[string]*ratelimit.Bucket{"tok": b}, nil, nil, admission.Config{}, discard)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range admission.Classes {
		tk := admission.Ticket{ID: "t" + c, Queue: admission.NotifyQueue, Model: "tok", Class: c, Tenant: "a", Tokens: int64(100 + 10*i)}
		if _, err := s.Register(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Admit(ctx, "tok", 2); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(ctx, "tok")
	if err != nil {
		t.Fatal(err)
	}
	in, adm, err := s.Tokens(ctx, "tok")
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(in, st.InTokens) || !maps.Equal(adm, st.AdmTokens) {
		t.Fatalf("Tokens in %v adm %v; Stats in %v adm %v", in, adm, st.InTokens, st.AdmTokens)
	}
	var admitted int64
	for _, v := range adm {
		admitted += v
	}
	if in["free"] != 130 || admitted == 0 {
		t.Fatalf("in %v adm %v: want free's 130 tokens in and some admitted", in, adm)
	}
	if _, _, err := s.Tokens(ctx, "nope"); err == nil {
		t.Fatal("an unknown model's tokens read without an error")
	}
}
