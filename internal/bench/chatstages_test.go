package bench

import (
	"slices"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
)

// TestChatStagesAddUp: burst 100, 100 tokens/s; 100 admitted at 0 s, so
// a 50-token chat created at 0.2 s finds 20 and waits 0.3 s for refill;
// admitted at 0.6 s the loop took the other 0.1 s. Every stage is the
// chat's own, and together they are its whole wait.
func TestChatStagesAddUp(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	ms := func(d int64) int64 { return t0.UnixMilli() + d }
	adm := []fakeopenai.Admission{{At: t0, Cost: 100}}
	tr := chatTrace{sent: ms(150), reply: ms(2000), call: callRecord{Created: ms(200), Admitted: ms(600), Start: ms(650), At: ms(700), Done: ms(1500), Tokens: 50}}
	got := chatTraceStages(tr, adm, 100, time.Second, 100)
	want := []int64{50, 300, 100, 50, 50, 800, 500}
	if !slices.Equal(want, got) {
		t.Errorf("stages (ms): %v, want %v", got, want)
	}
	var sum int64
	for _, v := range got {
		sum += v
	}
	if sum != tr.reply-tr.sent {
		t.Errorf("stages sum to %d ms, the wait is %d", sum, tr.reply-tr.sent)
	}
	// a baseline: no admission, its gate in the handler
	tr.call.Admitted = 0
	got = chatTraceStages(tr, adm, 100, time.Second, 100)
	if want := []int64{50, 300, 150, 0, 50, 800, 500}; !slices.Equal(want, got) {
		t.Errorf("no admission: %v, want %v", got, want)
	}
	// quantiles in uncompressed seconds, the slowest chat's stages
	fast := chatTrace{sent: ms(3000), reply: ms(3100), call: callRecord{Created: ms(3000), Admitted: ms(3000), Start: ms(3000), At: ms(3000), Done: ms(3100), Tokens: 1}}
	st := chatStagesOf([]chatTrace{fast, tr}, adm, 100, time.Second, 100, 10)
	if len(st) != len(chatStageNames) || st[5].Stage != "call" || st[5].Slowest != 8 || st[1].Slowest != 3 {
		t.Errorf("stages %+v", st)
	}
}

// TestRefillWaitReplaysTheBucket: the ledger's later admissions do not
// count, earlier ones drain the bucket.
func TestRefillWaitReplaysTheBucket(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	adm := []fakeopenai.Admission{{At: t0, Cost: 80}, {At: t0.Add(100 * time.Millisecond), Cost: 30}, {At: t0.Add(time.Second), Cost: 100}}
	for _, c := range []struct {
		name string
		at   time.Duration
		cost int64
		want time.Duration
	}{
		{"room at once", 600 * time.Millisecond, 50, 0},                            // 0 at 0.1 s, 50 at 0.6 s
		{"waits for the rest", 200 * time.Millisecond, 50, 400 * time.Millisecond}, // 100-80, +10-30 at 0.1 s: 10 at 0.2 s
		{"before any admission", -time.Second, 100, 0},
	} {
		if got := refillWait(adm, 100, time.Second, 100, t0.Add(c.at), c.cost); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
