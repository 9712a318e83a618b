// Package corpus provides pull requests for the fakes, the demo and the
// benchmark: either the real corpus in ../shared/fixtures/pr-corpus
// (read from disk, never copied into the repository) or PRs generated
// here, sized like it (median 2 files, mean 4, a long tail to 70; patches
// median 1 kB, mean 2.8 kB), so everything works without ../shared.
// It only provides data: fakegithub serves it and traffic announces it.
package corpus

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
)

// File is one changed file, with the fields GitHub's "list pull request
// files" returns. Patch is nil for binary files.
type File struct {
	Filename  string  `json:"filename"`
	Status    string  `json:"status"`
	Additions int     `json:"additions"`
	Deletions int     `json:"deletions"`
	Changes   int     `json:"changes"`
	Patch     *string `json:"patch"`
}

// PR is one pull request.
type PR struct {
	Repo   string `json:"repo"` // owner/name
	Number int    `json:"number"`
	Title  string `json:"title"`
	// Body is the description (the shared corpus has none; generated PRs do).
	Body    string `json:"body,omitempty"`
	HeadSHA string `json:"head_sha"`
	BaseSHA string `json:"base_sha"`
	Files   []File `json:"files"`
}

// Owner and Name split Repo.
func (p PR) Owner() string { o, _, _ := strings.Cut(p.Repo, "/"); return o }

// Name returns the repository name.
func (p PR) Name() string { _, n, _ := strings.Cut(p.Repo, "/"); return n }

// DefaultPath is where the shared corpus sits relative to the project root.
const DefaultPath = "../shared/fixtures/pr-corpus/prs.jsonl"

// Find looks for the shared corpus from dir upwards; "" when absent.
func Find(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		p := filepath.Join(d, DefaultPath)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}

// Load reads a prs.jsonl file.
func Load(path string) ([]PR, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("corpus: %w", err)
	}
	defer f.Close()
	var out []PR
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		var p PR
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return nil, fmt.Errorf("corpus: %s line %d: %w", path, n, err)
		}
		if p.Repo == "" || p.Number <= 0 || p.HeadSHA == "" {
			return nil, fmt.Errorf("corpus: %s line %d: repo, number and head_sha are required", path, n)
		}
		out = append(out, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("corpus: %s: %w", path, err)
	}
	return out, nil
}

var (
	repos   = []string{"acme/queue", "acme/gateway", "globex/billing", "initech/reviewer", "umbrella/sdk"}
	pkgs    = []string{"internal/queue", "internal/store", "api", "cmd/server", "pkg/client", "worker", "ratelimit", "auth", "web/src", "docs"}
	stems   = []string{"handler", "client", "config", "retry", "store", "scheduler", "server", "options", "errors", "metrics", "middleware", "limiter"}
	verbs   = []string{"Add", "Fix", "Refactor", "Support", "Handle", "Remove", "Improve"}
	objects = []string{"retry backoff", "context cancellation", "cluster mode", "rate limit headers", "pagination", "graceful shutdown", "error wrapping", "config validation"}
	idents  = []string{"ctx", "err", "opts", "client", "msg", "task", "queue", "limit", "resp", "cfg", "n", "deadline"}
	calls   = []string{"Process", "Enqueue", "Close", "Validate", "Wait", "Retry", "Lookup", "Decode", "Publish", "Reset"}
)

// Generate returns n synthetic PRs, deterministic for a seed. File counts
// and patch sizes follow the shared corpus's distribution; patches are
// valid unified diffs of Go-like code with real hunk arithmetic.
func Generate(n int, seed int64) []PR {
	rng := rand.New(rand.NewSource(seed))
	out := make([]PR, 0, n)
	for i := 0; i < n; i++ {
		files := 1 + int(rng.ExpFloat64()*2.6)
		if rng.Float64() < 0.03 {
			files = 20 + rng.Intn(50) // the long tail: large refactors
		}
		if files > 80 {
			files = 80
		}
		pr := PR{
			Repo:    repos[rng.Intn(len(repos))],
			Number:  1000 + i,
			Title:   fmt.Sprintf("%s %s", verbs[rng.Intn(len(verbs))], objects[rng.Intn(len(objects))]),
			Body:    fmt.Sprintf("This %s %s. It keeps the public behaviour and adds tests for the new cases.", verbs[rng.Intn(len(verbs))], objects[rng.Intn(len(objects))]),
			HeadSHA: sha(rng),
			BaseSHA: sha(rng),
		}
		seen := map[string]bool{}
		for len(pr.Files) < files {
			name := fmt.Sprintf("%s/%s.go", pkgs[rng.Intn(len(pkgs))], stems[rng.Intn(len(stems))])
			if rng.Float64() < 0.1 {
				name = strings.TrimSuffix(name, ".go") + "_test.go"
			}
			if seen[name] {
				name = fmt.Sprintf("%s/%s_%d.go", pkgs[rng.Intn(len(pkgs))], stems[rng.Intn(len(stems))], len(pr.Files))
				if seen[name] {
					continue
				}
			}
			seen[name] = true
			pr.Files = append(pr.Files, genFile(rng, name))
		}
		if rng.Float64() < 0.2 {
			pr.Files = append(pr.Files, File{Filename: "go.sum", Status: "modified", Additions: 4, Deletions: 2, Changes: 6,
				Patch: ptr("@@ -10,4 +10,6 @@\n github.com/a/b v1.0.0 h1:x=\n-github.com/c/d v1.1.0 h1:y=\n-github.com/c/d v1.1.0/go.mod h1:z=\n+github.com/c/d v1.2.0 h1:y2=\n+github.com/c/d v1.2.0/go.mod h1:z2=\n+github.com/e/f v0.3.0 h1:w=\n+github.com/e/f v0.3.0/go.mod h1:v=\n github.com/g/h v2.0.0 h1:u=\n")})
		}
		if rng.Float64() < 0.03 {
			pr.Files = append(pr.Files, File{Filename: "docs/diagram.png", Status: "added", Changes: 0})
		}
		out = append(out, pr)
	}
	return out
}

func ptr(s string) *string { return &s }

func sha(rng *rand.Rand) string {
	const hex = "0123456789abcdef"
	b := make([]byte, 40)
	for i := range b {
		b[i] = hex[rng.Intn(16)]
	}
	return string(b)
}

func codeLine(rng *rand.Rand) string {
	a, b := idents[rng.Intn(len(idents))], idents[rng.Intn(len(idents))]
	c := calls[rng.Intn(len(calls))]
	switch rng.Intn(6) {
	case 0:
		return fmt.Sprintf("\tif %s != nil {", a)
	case 1:
		return fmt.Sprintf("\t\treturn fmt.Errorf(\"%s: %%w\", %s)", strings.ToLower(c), b)
	case 2:
		return fmt.Sprintf("\t%s, err := %s.%s(ctx, %s)", a, b, c, idents[rng.Intn(len(idents))])
	case 3:
		return "\t}"
	case 4:
		return fmt.Sprintf("\t// %s %s before the deadline so callers see a clear error.", c, a)
	default:
		return fmt.Sprintf("\t%s.%s = %s", a, strings.ToLower(c[:1])+c[1:], b)
	}
}

// genFile writes a patch of a few hunks; sizes follow the corpus (median
// about 1 kB, long tail).
func genFile(rng *rand.Rand, name string) File {
	target := int(rng.ExpFloat64() * 2000)
	if target < 150 {
		target = 150
	}
	if target > 60000 {
		target = 60000
	}
	added := rng.Float64() < 0.1
	var b strings.Builder
	adds, dels := 0, 0
	line := 1 + rng.Intn(40)
	newLine := line
	for b.Len() < target {
		var body []string
		o, nw := 0, 0
		ctx := 3
		if added {
			ctx = 0
		}
		for i := 0; i < ctx; i++ {
			body = append(body, " "+codeLine(rng))
			o++
			nw++
		}
		for i, k := 0, 1+rng.Intn(12); i < k; i++ {
			if !added && rng.Float64() < 0.3 {
				body = append(body, "-"+codeLine(rng))
				o++
				dels++
			}
			body = append(body, "+"+codeLine(rng))
			nw++
			adds++
		}
		for i := 0; i < ctx; i++ {
			body = append(body, " "+codeLine(rng))
			o++
			nw++
		}
		oldStart := line
		if added {
			oldStart = 0
		}
		fmt.Fprintf(&b, "@@ -%d,%d +%d,%d @@ func %s(ctx context.Context) error {\n", oldStart, o, newLine, nw, calls[rng.Intn(len(calls))])
		b.WriteString(strings.Join(body, "\n"))
		b.WriteString("\n")
		if added {
			break
		}
		gap := 5 + rng.Intn(40)
		line += o + gap
		newLine += nw + gap
	}
	status := "modified"
	if added {
		status = "added"
	}
	p := strings.TrimSuffix(b.String(), "\n")
	return File{Filename: name, Status: status, Additions: adds, Deletions: dels, Changes: adds + dels, Patch: &p}
}
