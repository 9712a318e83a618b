package fakeopenai_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
)

// callUsage is one call's input as its usage reports it.
type callUsage struct{ prompt, read, write int64 }

// inputMirror is a client's copy of the fake's input bucket: the same
// continuous refill, levels scaled by the period in µs, full at first.
type inputMirror struct {
	limit, level int64
	per          time.Duration
	last         time.Time
}

// wait refills the mirror to now and returns how long until cost fits.
func (b *inputMirror) wait(now time.Time, cost int64) time.Duration {
	perUS := b.per.Microseconds()
	if el := now.Sub(b.last).Microseconds(); el > 0 {
		b.level = min(b.limit*perUS, b.level+el*b.limit)
		b.last = b.last.Add(time.Duration(el) * time.Microsecond)
	}
	need := cost*perUS - b.level
	if need <= 0 {
		return 0
	}
	return time.Duration((need+b.limit-1)/b.limit) * time.Microsecond
}

// TestAnthropicCacheReadsOutsideITPM: Anthropic counts cache reads
// outside its input-tokens-per-minute limit on most models, and the fake
// does. A client that charges its own copy of the limit only what it
// expects the cache not to serve (ceil(chars/4) of the blocks after its
// live breakpoints; every call refreshes the entries it uses) sends pull
// requests' review calls (prq's layout: a breakpoint after the
// instructions and one after the pull request's context, through
// llm.NewAnthropic) on the fake's stepped clock for 6 minutes:
//   - with the breakpoints: no 429, and the input the calls' usage
//     reports is at least 1.5 times what any client held to the limit
//     could send in that time (a full bucket plus 6 minutes of refill);
//   - the same calls without cache_control (the SDK directly): 429s, and
//     at most the limit's input;
//   - with breakpoints on a model whose limit counts cache reads (†):
//     429s, and at most the limit's input, though the cache serves reads.
func TestAnthropicCacheReadsOutsideITPM(t *testing.T) {
	const (
		itpm = 6000
		run  = 6 * time.Minute
	)
	system := prose("system", 80)
	contextOf := func(pr int) string { return prose(fmt.Sprintf("pr-%d", pr), 80) }
	fileOf := func(pr, file int) string { return prose(fmt.Sprintf("pr-%d file-%d", pr, file), 15) }

	cases := []struct {
		name         string
		breakpoints  bool
		readsCounted bool
	}{
		{"breakpoints", true, false},
		{"no cache_control", false, false},
		{"cache reads counted", true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := newStepClock()
			fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "claude-sonnet-4-5", RPM: 100_000, TPM: 10_000_000,
				ITPM: itpm, OTPM: 10_000_000, CacheReadsCount: tc.readsCounted}}, Keys: []string{antKey}, Now: clock.Now, Record: true})
			srv := httptest.NewServer(fake)
			defer srv.Close()
			ctx := context.Background()
			prq := llm.NewAnthropic(antKey, srv.URL, 10*time.Second, nil)
			sdk := antClient(srv.URL)
			call := func(sys, pctx, user string) (callUsage, time.Duration, error) {
				if tc.breakpoints {
					resp, err := prq.Complete(ctx, llm.Request{Model: "claude-sonnet-4-5", System: sys, Context: pctx, User: user, MaxOutput: 64})
					var e *llm.Error
					if errors.Is(err, llm.ErrRateLimited) && errors.As(err, &e) {
						s, _ := strconv.Atoi(e.Header.Get("retry-after"))
						return callUsage{}, time.Duration(s) * time.Second, err
					}
					return callUsage{resp.PromptTokens, resp.CachedTokens, resp.CacheWriteTokens}, 0, err
				}
				msg, err := sdk.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
					System: []anthropic.TextBlockParam{plain(sys)}, Messages: []anthropic.MessageParam{userOf(plain(pctx), plain(user))}})
				var ae *anthropic.Error
				if errors.As(err, &ae) && ae.StatusCode == 429 {
					s, _ := strconv.Atoi(ae.Response.Header.Get("retry-after"))
					return callUsage{}, time.Duration(s) * time.Second, err
				}
				if err != nil {
					return callUsage{}, 0, err
				}
				u := msg.Usage
				return callUsage{u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens}, 0, nil
			}

			start := clock.Now()
			mirror := &inputMirror{limit: itpm, level: itpm * time.Minute.Microseconds(), per: time.Minute, last: start}
			live := map[string]time.Time{} // the client's entries: when each expires
			var sum callUsage
			calls, limited := 0, 0
			for pr := 0; clock.Now().Sub(start) < run; pr++ {
				pctx := contextOf(pr)
				for file := 0; file < 10 && clock.Now().Sub(start) < run; file++ {
					user := fileOf(pr, file)
					// what the client expects the cache not to serve
					chars := utf8.RuneCountInString(user)
					if ctxKey := fmt.Sprint("context ", pr); !clock.Now().Before(live[ctxKey]) {
						chars += utf8.RuneCountInString(pctx)
						if !clock.Now().Before(live["system"]) {
							chars += utf8.RuneCountInString(system)
						}
					}
					cost := int64(chars+3) / 4
					clock.Step(mirror.wait(clock.Now(), cost))
					mirror.wait(clock.Now(), cost)
					mirror.level -= cost * time.Minute.Microseconds()
					for {
						u, retry, err := call(system, pctx, user)
						if retry > 0 {
							limited++
							clock.Step(retry)
							continue
						}
						if err != nil {
							t.Fatal(err)
						}
						calls++
						sum.prompt += u.prompt
						sum.read += u.read
						sum.write += u.write
						break
					}
					live["system"] = clock.Now().Add(5 * time.Minute)
					live[fmt.Sprint("context ", pr)] = clock.Now().Add(5 * time.Minute)
				}
			}
			elapsed := clock.Now().Sub(start)
			// the most input a client held to the limit could send in
			// elapsed: a full bucket and its refill
			most := float64(itpm) * (1 + elapsed.Minutes())
			multiple := float64(sum.prompt) / most
			t.Logf("%d calls in %v: %d input tokens (%.0f a minute; %d read from the cache, %d written), %.2f× the most the %d ITPM limit admits in that time; %d 429s",
				calls, elapsed, sum.prompt, float64(sum.prompt)/elapsed.Minutes(), sum.read, sum.write, multiple, itpm, limited)

			st := fake.Stats()["claude-sonnet-4-5"]
			if st.PromptTokens != sum.prompt || st.CachedTokens != sum.read || st.CacheWriteTokens != sum.write || st.RateLimited != int64(limited) {
				t.Fatalf("stats %+v, want the calls' usage: %+v, %d 429s", st, sum, limited)
			}
			var adm []ratelimit.Admission
			for _, a := range fake.Admissions("claude-sonnet-4-5") {
				adm = append(adm, ratelimit.Admission{At: a.At, Cost: a.Input})
			}
			if rep := ratelimit.CheckIntervals(adm, itpm, time.Minute, itpm); rep.Violations != 0 {
				t.Fatalf("the fake admitted more input than its limit: %d intervals over", rep.Violations)
			}
			switch {
			case tc.breakpoints && !tc.readsCounted:
				if limited != 0 || multiple < 1.5 {
					t.Fatalf("with breakpoints: %d 429s and %.2f× the limit, want 0 and at least 1.5×", limited, multiple)
				}
			default:
				if limited == 0 || multiple > 1 {
					t.Fatalf("%d 429s and %.2f× the limit, want 429s and at most 1×", limited, multiple)
				}
				if tc.breakpoints && sum.read == 0 {
					t.Fatal("the cache served no reads: the limit counting them is not what held the calls back")
				}
			}
		})
	}
}
