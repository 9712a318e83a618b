package harness

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/workers"
)

// cachePR is a pull request of six files whose diffs together are over
// the prompt cache's 1,024 tokens, so the prefix its prompts share (the
// instructions, the pull request, its diffs) is one a provider caches.
func cachePR() corpus.PR {
	p := corpus.PR{Repo: "acme/cache", Number: 61, Title: "Cache the parser's tokens", Body: "Keeps tokens between runs.", HeadSHA: RandomHex(40), BaseSHA: RandomHex(40)}
	for i := range 6 {
		var b strings.Builder
		fmt.Fprintf(&b, "@@ -1,3 +1,12 @@\n package parser\n")
		for k := range 10 {
			fmt.Fprintf(&b, "+func cached%d_%d(tokens []Token, at int) (Token, bool) { return lookup(tokens, at+%d) }\n", i, k, k)
		}
		b.WriteString(" // end")
		patch := b.String()
		p.Files = append(p.Files, corpus.File{Filename: fmt.Sprintf("parser/cache%d.go", i), Status: "modified", Additions: 10, Changes: 10, Patch: &patch})
	}
	return p
}

// TestPromptCacheEndToEnd: every call of one pull request's head to one
// model starts with the same system message and context, carries the
// pull request's prompt_cache_key, and all but the first calls of each
// model are served that prefix from the (fake, OpenAI-like) prompt
// cache. The head's walkthrough, one more call on the summary model,
// shares the summaries' prefix too.
func TestPromptCacheEndToEnd(t *testing.T) {
	t.Parallel()
	// OpenAI counts cached tokens toward TPM, so its heads carry no
	// shared context unless asked: here it is asked for
	s := startStack(t, stackOpts{record: true, tune: func(c *config.Config) {
		n := int64(workers.AutoContextTokens)
		c.Jobs.ContextTokens = &n
	}})
	pr := s.openPR(1, jobs.TierPaid, cachePR())
	s.waitDone([]jobs.PR{pr}, 60*time.Second)
	byModel := map[string][]fakeopenai.Call{}
	var walkthrough []fakeopenai.Call
	for _, c := range s.fakes.OpenAI.Calls() {
		switch {
		case c.Title != "Cache the parser's tokens" || c.Status != 200:
		case c.Kind == "walkthrough":
			walkthrough = append(walkthrough, c)
		default:
			byModel[c.Model] = append(byModel[c.Model], c)
		}
	}
	cfg := s.app.Config()
	if sum := byModel[cfg.Jobs.SummaryModel]; len(walkthrough) != 1 || len(sum) == 0 || walkthrough[0].Model != cfg.Jobs.SummaryModel ||
		walkthrough[0].System != sum[0].System || walkthrough[0].Prompt != sum[0].Prompt || walkthrough[0].CacheKey != sum[0].CacheKey {
		t.Errorf("%d walkthrough calls, want one on %s with the summaries' prefix and cache key", len(walkthrough), cfg.Jobs.SummaryModel)
	}
	for _, model := range []string{cfg.Jobs.SummaryModel, cfg.Jobs.ReviewModel} {
		calls := byModel[model]
		if len(calls) != 6 {
			t.Fatalf("%s: %d calls, want 6 (one per file)", model, len(calls))
		}
		for _, c := range calls {
			if c.CacheKey == "" || c.CacheKey != calls[0].CacheKey || strings.Contains(c.CacheKey, "acme") {
				t.Errorf("%s %s: prompt_cache_key %q, want the pull request's (%q), naming no repository", model, c.Path, c.CacheKey, calls[0].CacheKey)
			}
			if c.System != calls[0].System || c.Prompt != calls[0].Prompt {
				t.Errorf("%s %s: another prefix than the head's first call", model, c.Path)
			}
			for i := range 6 {
				if !strings.Contains(c.Prompt, fmt.Sprintf("Diff of parser/cache%d.go:\n", i)) {
					t.Errorf("%s %s: the context lacks file %d's diff", model, c.Path, i)
				}
			}
		}
		st := s.fakes.OpenAI.Stats()[model]
		// calls after the first: at least the cache's first 1,024 tokens
		// each, whatever the order they reached the fake in
		if st.CachedTokens < 5*1024 {
			t.Errorf("%s: %d cached tokens over 6 calls, want at least %d (five calls served the shared prefix)", model, st.CachedTokens, 5*1024)
		}
		t.Logf("%s: 6 calls, %d admitted tokens, %d served from the cache", model, st.AdmittedTokens, st.CachedTokens)
	}
}
