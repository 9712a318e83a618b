package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/fake/fakeopenai"
)

// fakeSet is a running fake GitHub and fake provider on loopback.
type fakeSet struct {
	github    *fakegithub.Server
	openai    *fakeopenai.Server
	githubURL string // with the Enterprise base path /api/v3/
	openaiURL string // with /v1
	keyPEM    []byte
	appID     int64
	closers   []func()
}

func (f *fakeSet) close() {
	for _, c := range f.closers {
		c()
	}
}

func listenServe(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}

// fakeModels are the demo's provider limits: a cheap fast model and a
// heavy slow one, per minute before compression.
func fakeModels(cfg *Config) []fakeopenai.Model {
	var out []fakeopenai.Model
	for _, m := range cfg.Models {
		lat, jit := 800*time.Millisecond, 400*time.Millisecond
		if m.Name == cfg.Jobs.ReviewModel {
			lat, jit = 8*time.Second, 5*time.Second // the heavy model: seconds to tens of seconds
		}
		out = append(out, fakeopenai.Model{Name: m.Name, RPM: m.RequestsPerMinute, TPM: m.TokensPerMinute, Latency: lat, Jitter: jit, ContextTokens: m.ContextTokens})
	}
	return out
}

// startFakes starts both fakes with the configuration's limits, periods
// compressed by compress (limits per minute/compress).
func startFakes(cfg *Config, compress float64, apiKey string, seed int64, record ...bool) (*fakeSet, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	f := &fakeSet{appID: 1, keyPEM: pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})}
	per := time.Duration(float64(time.Minute) / compress)
	f.github = fakegithub.New(fakegithub.Config{AppID: f.appID, PublicKey: &key.PublicKey, WritePeriod: per})
	f.openai = fakeopenai.New(fakeopenai.Config{Models: fakeModels(cfg), Period: per, Keys: []string{apiKey}, Seed: seed, LatencyScale: 1 / compress,
		Record: len(record) > 0 && record[0]})
	gurl, gclose, err := listenServe(f.github)
	if err != nil {
		return nil, err
	}
	ourl, oclose, err := listenServe(f.openai)
	if err != nil {
		gclose()
		return nil, err
	}
	f.githubURL, f.openaiURL = gurl+"/api/v3/", ourl+"/v1"
	f.closers = []func(){gclose, oclose}
	return f, nil
}

func runFake(ctx context.Context, env *cmdEnv, args []string) error {
	usage := "prq fake github|openai [--addr 127.0.0.1:9100] — a faithful fake of the GitHub API or an OpenAI-compatible provider"
	if len(args) == 0 || (args[0] != "github" && args[0] != "openai") {
		return &usageError{usage}
	}
	which := args[0]
	fs := newFlagSet(env, "fake "+which, usage)
	addr := fs.String("addr", "127.0.0.1:9100", "listen address")
	compress := fs.Float64("compress", 1, "time compression: limits per minute/compress")
	keyPath := fs.String("app-public-key", "", "github: PEM of the App's RSA key (private or public) to verify JWTs")
	appID := fs.Int64("app-id", 1, "github: the App id JWTs must carry")
	corpusPath := fs.String("corpus", "", "github: prs.jsonl to serve (default: ../shared/fixtures/pr-corpus when present, else generated PRs)")
	inst := fs.Int64("installation", 1, "github: the installation serving the PRs")
	apiKey := fs.String("api-key", "", "openai: the only API key accepted (default: any)")
	if help, err := parseFlags(fs, args[1:]); help || err != nil {
		return err
	}
	if *compress <= 0 {
		return &usageError{"--compress must be positive"}
	}
	per := time.Duration(float64(time.Minute) / *compress)
	var h http.Handler
	switch which {
	case "openai":
		cfg := defaultConfig()
		var keys []string
		if *apiKey != "" {
			keys = []string{*apiKey}
		}
		h = fakeopenai.New(fakeopenai.Config{Models: fakeModels(&cfg), Period: per, Keys: keys, LatencyScale: 1 / *compress})
	case "github":
		if *keyPath == "" {
			return &usageError{"fake github needs --app-public-key (the App's key, to verify its JWTs)"}
		}
		b, err := os.ReadFile(*keyPath)
		if err != nil {
			return err
		}
		pub, err := publicKey(b)
		if err != nil {
			return err
		}
		gh := fakegithub.New(fakegithub.Config{AppID: *appID, PublicKey: pub, WritePeriod: per})
		prs, src, err := loadPRs(*corpusPath, 200, 1)
		if err != nil {
			return err
		}
		for _, p := range prs {
			gh.AddPR(*inst, "", "", p)
		}
		fmt.Fprintf(env.stdout, "serving %d PRs from %s for installation %d\n", len(prs), src, *inst)
		h = gh
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	fmt.Fprintf(env.stdout, "fake %s listening on http://%s (limits per %s)\n", which, ln.Addr(), per)
	<-ctx.Done()
	return srv.Close()
}

func publicKey(b []byte) (*rsa.PublicKey, error) {
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

// loadPRs reads the corpus at path, or finds the shared one, or
// generates n PRs when neither exists.
func loadPRs(path string, n int, seed int64) ([]corpus.PR, string, error) {
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
