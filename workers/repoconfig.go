package workers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/internal/repoconfig"
	"github.com/prq-dev/prq/store"
)

// repoConfigs reads repositories' .prq.yaml at a base commit, over
// their organisation's prq.yaml, and keeps what it read: a repository's
// file at a commit for good (a commit does not change), an
// organisation's for orgTTL, each parse by the file's blob sha.
type repoConfigs struct {
	now func() time.Time
	// last keeps each layer's last valid file (nil: none kept); saved
	// is which blob was last kept per layer, so it is written once.
	last   LastConfigs
	mu     sync.Mutex
	saved  map[string]kept      // "inst|owner/repo" -> the blob kept, and when
	atBase map[string]layer     // "owner/repo@sha" -> the repository's layer
	org    map[string]orgRead   // owner -> its layer, when read
	parsed map[string]parse     // blob sha -> the parse
	guides map[string]guideline // "owner/repo@sha:path" -> the guidelines file there
}

// orgTTL is how long an organisation's defaults are used before they
// are read again.
const orgTTL = time.Minute

// maxCached bounds each cache; a full one starts over.
const maxCached = 4096

// parse is a file's content parsed: the file, or why not.
type parse struct {
	file repoconfig.File
	err  *repoconfig.Error
}

type orgRead struct {
	l  layer
	at time.Time
}

// layer is one file's part of a configuration: found or not, parsed, or
// why it could not be used.
type layer struct {
	found  bool
	source string
	file   repoconfig.File
	// problem says why the file could not be used ("" when it could).
	problem string
	// refused: GitHub refused the App the file (not kept).
	refused bool
	// sha and content are the file's blob, while it is being read (a
	// valid one is kept as the repository's last valid; cached layers
	// drop the content).
	sha     string
	content []byte
}

func newRepoConfigs(now func() time.Time, last LastConfigs) *repoConfigs {
	return &repoConfigs{now: now, last: last, saved: map[string]kept{}, atBase: map[string]layer{}, org: map[string]orgRead{}, parsed: map[string]parse{}, guides: map[string]guideline{}}
}

// LastConfigs keeps each repository's last valid configuration file (a
// *store.Store), so a broken edit falls back to it rather than to the
// defaults.
type LastConfigs interface {
	LastConfig(ctx context.Context, installation int64, repo string) (store.LastConfig, bool, error)
	SetLastConfig(ctx context.Context, installation int64, repo string, c store.LastConfig) error
	TouchLastConfig(ctx context.Context, installation int64, repo string) error
}

var _ LastConfigs = (*store.Store)(nil)

// effective is a repository's configuration at a base commit and what
// the pull request is told of files that could not be used ("" when
// none). An error is GitHub failing in a way worth a retry.
func (rc *repoConfigs) effective(ctx context.Context, gh PRReader, inst int64, owner, repo, base string) (repoconfig.Config, string, error) {
	org, err := rc.orgLayer(ctx, gh, owner)
	if err != nil {
		return repoconfig.Config{}, "", err
	}
	own, err := rc.repoLayer(ctx, gh, owner, repo, base)
	if err != nil {
		return repoconfig.Config{}, "", err
	}
	c := repoconfig.Default()
	var notice string
	for i, l := range []layer{org, own} {
		key := owner + "/" + repo
		if i == 0 {
			key = owner + "/" + repoconfig.OrgRepo
		}
		switch {
		case l.problem != "":
			if notice != "" {
				notice += " "
			}
			notice += l.problem
			// a file that cannot be used (not one GitHub refused the
			// App): its last valid version applies, if one was kept
			if !l.refused {
				if last, ok := rc.lastValid(ctx, inst, key); ok {
					c = c.Apply(last.source, last.file)
				}
			}
		case l.found:
			rc.keep(ctx, inst, key, l)
			c = c.Apply(l.source, l.file)
		}
	}
	if notice != "" {
		notice += fmt.Sprintf(" Applied instead: %s.", describe(c.Sources))
	}
	return c, notice, nil
}

// kept is the blob a process last kept as a repository's last valid
// configuration, and when.
type kept struct {
	sha string
	at  time.Time
}

// keepRefresh is how often a process renews the kept file's lifetime
// while the file stays the same.
const keepRefresh = 24 * time.Hour

// keep records a layer's file as its repository's last valid one: a new
// blob at once, the same one's lifetime renewed at most daily (a failure
// costs only the fallback of a later broken edit).
func (rc *repoConfigs) keep(ctx context.Context, inst int64, key string, l layer) {
	if rc.last == nil || l.sha == "" {
		return
	}
	k := fmt.Sprint(inst) + "|" + key
	now := rc.now()
	rc.mu.Lock()
	prev := rc.saved[k]
	rc.mu.Unlock()
	if prev.sha == l.sha && now.Sub(prev.at) < keepRefresh {
		return
	}
	var err error
	switch {
	case l.content != nil:
		err = rc.last.SetLastConfig(ctx, inst, key, store.LastConfig{SHA: l.sha, Source: l.source, Content: l.content})
	case prev.sha == l.sha:
		err = rc.last.TouchLastConfig(ctx, inst, key)
	default:
		return // a cached layer without its content: kept when next read
	}
	if err != nil {
		return
	}
	rc.mu.Lock()
	if len(rc.saved) >= maxCached {
		rc.saved = map[string]kept{}
	}
	rc.saved[k] = kept{sha: l.sha, at: now}
	rc.mu.Unlock()
}

// lastValid is a repository's last valid file as a layer, parsed again
// (a file valid once that today's rules refuse is not used).
func (rc *repoConfigs) lastValid(ctx context.Context, inst int64, key string) (layer, bool) {
	if rc.last == nil {
		return layer{}, false
	}
	lc, ok, err := rc.last.LastConfig(ctx, inst, key)
	if err != nil || !ok {
		return layer{}, false
	}
	f, err := repoconfig.Parse("", lc.Content)
	if err != nil {
		return layer{}, false
	}
	return layer{found: true, source: lc.Source + " (its last valid version, blob " + short(lc.SHA) + ")", file: f}, true
}

// describe names a configuration's sources, the one on top first.
func describe(sources []string) string {
	parts := make([]string, 0, len(sources))
	for i := len(sources) - 1; i >= 0; i-- {
		parts = append(parts, sources[i])
	}
	return strings.Join(parts, " over ")
}

func (rc *repoConfigs) orgLayer(ctx context.Context, gh PRReader, owner string) (layer, error) {
	rc.mu.Lock()
	r, ok := rc.org[owner]
	rc.mu.Unlock()
	if ok && rc.now().Sub(r.at) < orgTTL {
		return r.l, nil
	}
	l, err := rc.read(ctx, gh, owner, repoconfig.OrgRepo, []string{repoconfig.OrgPath}, "")
	if err != nil {
		return layer{}, err
	}
	if l.refused {
		return l, nil
	}
	rc.mu.Lock()
	if len(rc.org) >= maxCached {
		rc.org = map[string]orgRead{}
	}
	cached := l
	cached.content = nil
	rc.org[owner] = orgRead{l: cached, at: rc.now()}
	rc.mu.Unlock()
	return l, nil
}

func (rc *repoConfigs) repoLayer(ctx context.Context, gh PRReader, owner, repo, base string) (layer, error) {
	k := owner + "/" + repo + "@" + base
	rc.mu.Lock()
	l, ok := rc.atBase[k]
	rc.mu.Unlock()
	if ok {
		return l, nil
	}
	l, err := rc.read(ctx, gh, owner, repo, repoconfig.Paths, base)
	if err != nil {
		return layer{}, err
	}
	if l.refused {
		return l, nil // GitHub refused the App: read again next time (a permission may be granted)
	}
	rc.mu.Lock()
	if len(rc.atBase) >= maxCached {
		rc.atBase = map[string]layer{}
	}
	cached := l
	cached.content = nil
	rc.atBase[k] = cached
	rc.mu.Unlock()
	return l, nil
}

// read reads the first of paths found in owner/repo at ref and parses it.
func (rc *repoConfigs) read(ctx context.Context, gh PRReader, owner, repo string, paths []string, ref string) (layer, error) {
	for _, p := range paths {
		source := owner + "/" + repo + ":" + p
		if ref != "" {
			source += " at " + short(ref)
		}
		fc, err := gh.Contents(ctx, owner, repo, p, ref)
		switch {
		case errors.Is(err, ghapp.ErrNotFound):
			continue
		case errors.Is(err, ghapp.ErrTooLarge):
			return layer{found: true, source: source, problem: fmt.Sprintf("%s could not be used: the file is %d bytes, over the limit of %d.", source, fc.Size, repoconfig.MaxBytes)}, nil
		case errors.Is(err, ghapp.ErrForbidden):
			return layer{found: true, refused: true, source: source, problem: fmt.Sprintf("%s could not be read: GitHub refused the App (it needs the contents: read permission).", source)}, nil
		case err != nil:
			return layer{}, fmt.Errorf("read %s: %w", source, err)
		}
		rc.mu.Lock()
		pf, ok := rc.parsed[fc.SHA]
		rc.mu.Unlock()
		if !ok {
			f, err := repoconfig.Parse("", fc.Content)
			pf.file = f
			errors.As(err, &pf.err)
			rc.mu.Lock()
			if len(rc.parsed) >= maxCached {
				rc.parsed = map[string]parse{}
			}
			rc.parsed[fc.SHA] = pf
			rc.mu.Unlock()
		}
		l := layer{found: true, source: source, file: pf.file, sha: fc.SHA, content: fc.Content}
		if pf.err != nil {
			e := *pf.err
			e.Source = source
			l.problem = e.Error() + "."
		}
		return l, nil
	}
	return layer{}, nil
}
