package harness

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/workers"
)

// Fakes are a running fake GitHub and fake provider on loopback.
type Fakes struct {
	GitHub    *fakegithub.Server
	OpenAI    *fakeopenai.Server
	GitHubURL string // with the Enterprise base path /api/v3/
	OpenAIURL string // with /v1
	KeyPEM    []byte // the GitHub App's private key
	AppID     int64
	APIKey    string // the only key the fake provider accepts
	closers   []func()
}

// Close stops both fakes.
func (f *Fakes) Close() {
	for _, c := range f.closers {
		c()
	}
}

// ListenServe serves h on a free loopback port and returns its URL and
// a function that stops it.
func ListenServe(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}

// FakeModels are the fake provider's models for cfg: its limits, with the
// review model slow (seconds to tens of seconds) and the others fast.
func FakeModels(cfg *config.Config) []fakeopenai.Model {
	var out []fakeopenai.Model
	for _, m := range cfg.Models {
		lat, jit := 800*time.Millisecond, 400*time.Millisecond
		if m.Name == cfg.Jobs.ReviewModel {
			lat, jit = 8*time.Second, 5*time.Second // the heavy model: seconds to tens of seconds
		}
		out = append(out, fakeopenai.Model{Name: m.Name, RPM: m.RequestsPerMinute, TPM: m.TokensPerMinute, Latency: lat, Jitter: jit, ContextTokens: m.ContextTokens, Flex: m.Flex,
			BatchTokens: m.BatchQueueTokens, ITPM: m.InputTokensPerMinute, OTPM: m.OutputTokensPerMinute})
	}
	return out
}

// StartFakes starts both fakes with the configuration's limits, periods
// compressed by compress (limits per minute/compress). The provider
// accepts only apiKey; record keeps every admission for the checkers.
func StartFakes(cfg *config.Config, compress float64, apiKey string, seed int64, record bool) (*Fakes, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	f := &Fakes{AppID: 1, APIKey: apiKey, KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})}
	per := time.Duration(float64(time.Minute) / compress)
	f.GitHub = fakegithub.New(fakegithub.Config{AppID: f.AppID, PublicKey: &key.PublicKey, WritePeriod: per})
	f.OpenAI = fakeopenai.New(fakeopenai.Config{Models: FakeModels(cfg), Period: per, Keys: []string{apiKey}, Seed: seed, LatencyScale: 1 / compress,
		Record: record, BatchWindow: time.Duration(float64(24*time.Hour) / compress)})
	gurl, gclose, err := ListenServe(f.GitHub)
	if err != nil {
		return nil, err
	}
	ourl, oclose, err := ListenServe(f.OpenAI)
	if err != nil {
		gclose()
		return nil, err
	}
	f.GitHubURL, f.OpenAIURL = gurl+"/api/v3/", ourl+"/v1"
	f.closers = []func(){gclose, oclose}
	return f, nil
}

// PublicKey reads an RSA key (private or public, PEM) and returns its
// public half.
func PublicKey(b []byte) (*rsa.PublicKey, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("not a PEM key")
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return &k.PublicKey, nil
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		if rk, ok := k.(*rsa.PrivateKey); ok {
			return &rk.PublicKey, nil
		}
	}
	if k, err := x509.ParsePKIXPublicKey(block.Bytes); err == nil {
		if rk, ok := k.(*rsa.PublicKey); ok {
			return rk, nil
		}
	}
	if k, err := x509.ParsePKCS1PublicKey(block.Bytes); err == nil {
		return k, nil
	}
	return nil, fmt.Errorf("not an RSA key")
}

// LoadPRs reads the corpus at path, or finds the shared one, or
// generates n PRs when neither exists. It returns where they came from.
func LoadPRs(path string, n int, seed int64) ([]corpus.PR, string, error) {
	if path == "" {
		wd, _ := os.Getwd()
		path = corpus.Find(wd)
	}
	if path != "" {
		prs, err := corpus.Load(path)
		return prs, path, err
	}
	return corpus.Generate(n, seed), fmt.Sprintf("%d generated PRs (seed %d)", n, seed), nil
}

// Configure points cfg at the fakes: the GitHub App (id, key, API URL,
// slug), a fresh webhook secret, and the provider's key and URL.
func (f *Fakes) Configure(cfg *config.Config, slug string) {
	cfg.GitHub.AppID, cfg.GitHub.PrivateKey, cfg.GitHub.APIURL = f.AppID, config.Secret(f.KeyPEM), f.GitHubURL
	cfg.GitHub.WebhookSecret, cfg.GitHub.AppSlug = config.Secret(RandomHex(32)), slug
	f.GitHub.SetAppSlug(slug) // the fake writes as "<slug>[bot]", as GitHub does
	cfg.OpenAI.APIKey, cfg.OpenAI.BaseURL = config.Secret(f.APIKey), f.OpenAIURL
}

// WorkerEnv is the environment of a worker process (prq worker or
// bench-worker) that uses the fakes and the Redis at redisURL: this
// process's environment plus the settings; later entries win.
func (f *Fakes) WorkerEnv(redisURL, slug string) []string {
	f.GitHub.SetAppSlug(slug)
	return append(os.Environ(), "REDIS_URL="+redisURL, "GITHUB_APP_ID="+strconv.FormatInt(f.AppID, 10), "GITHUB_PRIVATE_KEY="+string(f.KeyPEM),
		"GITHUB_API_URL="+f.GitHubURL, "OPENAI_API_KEY="+f.APIKey, "OPENAI_BASE_URL="+f.OpenAIURL, "GITHUB_APP_SLUG="+slug)
}

// Summaries counts the PR's comments that hold prq's summary marker.
func (f *Fakes) Summaries(pr jobs.PR) int {
	n := 0
	for _, c := range f.GitHub.Comments(pr.Owner, pr.Repo, pr.Number) {
		if strings.Contains(c.Body, workers.SummaryMarker) {
			n++
		}
	}
	return n
}

// LLMCalls is how many requests reached the fake provider.
func (f *Fakes) LLMCalls() int64 {
	var n int64
	for _, st := range f.OpenAI.Stats() {
		n += st.Requests
	}
	return n
}
