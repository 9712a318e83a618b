package workers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
)

// The walkthrough: one summary job per head of a pull request of more
// than one file, on the summary model, admitted and ordered like the
// head's other summary jobs (the last of them). Its answer opens the
// summary comment: what changed, grouped by theme.

// taskWalkthrough is the walkthrough prompt's task line.
const taskWalkthrough = "Task: write the walkthrough of the pull request below: what changed, grouped by theme, one short bullet per theme naming its files; at most 8 bullets, no preamble.\n"

// walkthroughPatchChars bounds each file's patch in a walkthrough prompt
// before it is cut further to fit the model: the walkthrough needs the
// gist of each file, not every line.
const walkthroughPatchChars = 4000

// wantsWalkthrough reports whether a head gets a walkthrough: the
// repository has not turned it off, and more than one of its files is
// reviewed (those unchanged since the last review included).
func wantsWalkthrough(on bool, data []store.FileData, summaries int) bool {
	if !on || summaries == 0 {
		return false
	}
	n := 0
	for _, fd := range data {
		if fd.SkipReason == "" || strings.HasPrefix(fd.SkipReason, "unchanged since") {
			n++
		}
	}
	return n > 1
}

// walkthroughPrompt renders a head's walkthrough prompt: the list of its
// files, then the patches of those reviewed, each cut (halving its share)
// until the prompt fits the model. It shares the summaries' system
// message and context, so it meets the same prompt cache.
func walkthroughPrompt(pc prContext, files []store.FileData, m Model, tok *ratelimit.Tokenizer) (prompt, error) {
	for limit := walkthroughPatchChars; ; limit /= 2 {
		p := prompt{system: pc.system(m, jobs.KindSummary), context: pc.context(), user: walkthroughUser(files, limit)}
		if err := p.measure(m, tok); err != nil {
			return prompt{}, err
		}
		if p.fits(m) {
			return p, nil
		}
		if limit == 0 {
			return prompt{}, p.tooLarge(m)
		}
	}
}

// walkthroughUser lists the files (with why one is not reviewed) and the
// reviewed ones' patches, each at most limit characters.
func walkthroughUser(files []store.FileData, limit int) string {
	var b strings.Builder
	b.WriteString(taskWalkthrough)
	fmt.Fprintf(&b, "Files (%d):\n", len(files))
	for _, f := range files {
		fmt.Fprintf(&b, "- %s (%s, +%d -%d)", f.Path, f.Status, f.Additions, f.Deletions)
		if f.SkipReason != "" && !strings.HasPrefix(f.SkipReason, "unchanged since") {
			fmt.Fprintf(&b, ": %s", f.SkipReason)
		}
		b.WriteString("\n")
	}
	for _, f := range files {
		if f.Patch == "" || (f.SkipReason != "" && !strings.HasPrefix(f.SkipReason, "unchanged since")) || limit == 0 {
			continue
		}
		patch := f.Patch
		cut := ""
		if len(patch) > limit {
			patch = patch[:limit]
			if i := strings.LastIndexByte(patch, '\n'); i > 0 {
				patch = patch[:i]
			}
			cut = "\n(the rest of this file's patch was left out)"
		}
		fmt.Fprintf(&b, "\n%s\n%s%s\n", fileHeader(f, ""), patch, cut)
	}
	return b.String()
}

// walkthroughFile is the file index a walkthrough job's payload carries:
// it is about every file of the head.
const walkthroughFile = -1

// headFiles reads a head's files, in the plan's order, and the context
// its prompts share.
func headFiles(ctx context.Context, st FileStore, pr jobs.PR, head string) ([]store.FileData, string, error) {
	byIndex, err := st.Files(ctx, pr, head)
	if err != nil {
		return nil, "", err
	}
	if len(byIndex) == 0 {
		return nil, "", store.ErrNotFound
	}
	files := make([]store.FileData, 0, len(byIndex))
	for _, i := range slices.Sorted(maps.Keys(byIndex)) {
		files = append(files, byIndex[i])
	}
	_, shared, err := st.FileAndContext(ctx, pr, head, files[0].Index)
	return files, shared, err
}

// walkthroughOf is the text of a head's walkthrough, if it has one.
func walkthroughOf(results []store.Result) string {
	for _, r := range results {
		if r.Walkthrough && !r.Failed {
			return r.Text
		}
	}
	return ""
}
