package workers

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// VoteStore keeps the findings whose reactions are read back and the 👍
// and 👎 they were given (a *store.Store).
type VoteStore interface {
	TrackFindings(ctx context.Context, pr jobs.PR, fs map[string]store.TrackedFinding) error
	TrackedFindings(ctx context.Context, pr jobs.PR) (map[string]store.TrackedFinding, error)
	SetVotes(ctx context.Context, installation, commentID int64, f store.TrackedFinding, up, down int) error
	ScheduleVotes(ctx context.Context, pr jobs.PR, at time.Time) error
	DueVotes(ctx context.Context, now time.Time, limit int64) ([]jobs.PR, error)
}

var _ VoteStore = (*store.Store)(nil)

// MaxVoteReads bounds the comments whose reactions one finalize reads
// (one GitHub request each, a page of 100 reactions): a pull request
// with more is read in turns, the next finalize going on where this one
// stopped. With the list of prq's comments, a finalize makes at most
// about 52 reads: far inside an installation's 5,000 requests an hour.
const MaxVoteReads = 50

// votesCursor records, in the pull request's posted hash, the last
// comment whose reactions were read.
const votesCursor = "votes_cursor"

// track records the findings posted as line comments (the first posted
// of them: the rest went into the review's body) for their reactions to
// be read back. A finding made by a result without a model (recorded by
// an older version) is not counted.
func (p *Finalizer) track(ctx context.Context, pr jobs.PR, lc lineComments, posted int) error {
	if p.cfg.Votes == nil {
		return nil
	}
	fs := map[string]store.TrackedFinding{}
	for i := range min(posted, len(lc.keys)) {
		if k, t := lc.keys[i], lc.tracked[i]; k != "" && t.Model != "" {
			fs[k] = t
		}
	}
	if len(fs) == 0 {
		return nil
	}
	if err := p.cfg.Votes.TrackFindings(ctx, pr, fs); err != nil {
		return err
	}
	return p.cfg.Votes.ScheduleVotes(ctx, pr, p.cfg.NowFunc().Add(VotesFirstRead))
}

// The periodic pass: reactions come after a review, often after its
// pull request's last push, so each pull request with findings is read
// again on a schedule that thins out with the age of its latest
// findings (next when that age has doubled, between VotesFirstRead and a
// day later: about 12 reads on the first day, then one a day), as long as
// its data is kept (retention). A pass claims at most votesPerSweep
// pull requests, each read by one process.
const (
	// VotesFirstRead is how soon after a review its pull request's
	// reactions are first read by the periodic pass.
	VotesFirstRead = 30 * time.Second
	votesPerSweep  = 5
	votesMaxWait   = 24 * time.Hour
)

// SweepVotes runs the periodic pass every every until ctx ends.
func (p *Finalizer) SweepVotes(ctx context.Context, every time.Duration) {
	if p.cfg.Votes == nil {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := p.SweepVotesOnce(ctx); err != nil && ctx.Err() == nil {
				p.cfg.Log.WarnContext(ctx, "the periodic read of reactions on prq's findings failed", "err", err)
			}
		}
	}
}

// SweepVotesOnce reads the reactions of the pull requests due now (at
// most votesPerSweep) and schedules each again while it has tracked
// findings. It returns how many it read.
func (p *Finalizer) SweepVotesOnce(ctx context.Context) (int, error) {
	now := p.cfg.NowFunc()
	prs, err := p.cfg.Votes.DueVotes(ctx, now, votesPerSweep)
	if err != nil {
		return 0, err
	}
	for _, pr := range prs {
		if st := p.cfg.Installs; st != nil {
			if why, err := st.Disabled(ctx, pr.Installation); err != nil {
				return 0, err
			} else if why != "" {
				continue // uninstalled, suspended or refused a token: not read again
			}
		}
		if gh, err := p.cfg.GitHub.ReviewWriter(pr.Installation); err == nil {
			p.readVotes(ctx, gh, pr, "")
		}
		tracked, err := p.cfg.Votes.TrackedFindings(ctx, pr)
		if err != nil {
			return 0, err
		}
		var latest int64
		for _, f := range tracked {
			latest = max(latest, f.Posted)
		}
		if len(tracked) == 0 {
			continue // the pull request's data expired: done
		}
		wait := min(max(now.Sub(time.Unix(latest, 0)), VotesFirstRead), votesMaxWait)
		if err := p.cfg.Votes.ScheduleVotes(ctx, pr, now.Add(wait)); err != nil {
			return 0, err
		}
	}
	return len(prs), nil
}

// readVotes reads the 👍 and 👎 people gave the pull request's tracked
// findings of reviews before what and records them (each person once per
// comment, prq's own reactions left out): the findings' acceptance rate
// by model and kind.
// It reads at most MaxVoteReads comments, going on from where the last
// pass stopped. Reading is a decoration: a failure (a rate limit
// included) ends the pass, logged, and never holds back the head's
// results; the next finalize reads again, and counts nothing twice.
func (p *Finalizer) readVotes(ctx context.Context, gh ReviewWriter, pr jobs.PR, what string) {
	if p.cfg.Votes == nil {
		return
	}
	if err := p.votes(ctx, gh, pr, what); err != nil {
		p.cfg.Log.WarnContext(ctx, "reading the reactions on prq's findings failed; the next finalize reads them again", "pr", pr.String(), "err", err)
	}
}

func (p *Finalizer) votes(ctx context.Context, gh ReviewWriter, pr jobs.PR, what string) error {
	tracked, err := p.cfg.Votes.TrackedFindings(ctx, pr)
	if err != nil || len(tracked) == 0 {
		return err
	}
	own, err := gh.OwnReviewComments(ctx, pr.Owner, pr.Repo, pr.Number)
	if err != nil {
		return err
	}
	type finding struct {
		id int64
		f  store.TrackedFinding
	}
	var fs []finding
	for _, c := range own {
		if k := findingKey(c.Body); k != "" && strings.Contains(c.Body, p.cfg.Markers.Finding(pr.Key(), k)) {
			if t, ok := tracked[k]; ok && t.What != what { // this review's own are new
				fs = append(fs, finding{c.ID, t})
			}
		}
	}
	if len(fs) == 0 {
		return nil
	}
	slices.SortFunc(fs, func(a, b finding) int { return cmp.Compare(a.id, b.id) })
	last, err := p.cfg.Publications.Posted(ctx, pr, votesCursor)
	if err != nil {
		return err
	}
	// from the first comment after the cursor, round to the start
	from, _ := slices.BinarySearchFunc(fs, last+1, func(a finding, id int64) int { return cmp.Compare(a.id, id) })
	fs = slices.Concat(fs[from:], fs[:from])
	for _, x := range fs[:min(len(fs), MaxVoteReads)] {
		v, err := gh.CommentVotes(ctx, pr.Owner, pr.Repo, pr.Number, x.id)
		if err != nil {
			return err
		}
		if err := p.cfg.Votes.SetVotes(ctx, pr.Installation, x.id, x.f, len(v.Up), len(v.Down)); err != nil {
			return err
		}
		if err := p.cfg.Publications.SetPosted(ctx, pr, votesCursor, x.id); err != nil {
			return err
		}
	}
	return nil
}

// findingKey is the key a finding's marker names in body ("" for none).
func findingKey(body string) string {
	const open = "<!-- prq:finding key="
	_, rest, ok := strings.Cut(body, open)
	if !ok {
		return ""
	}
	k, _, _ := strings.Cut(rest, " ")
	return k
}
