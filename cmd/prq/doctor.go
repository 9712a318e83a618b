package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/doctor"
	"github.com/prq-dev/prq/internal/server"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
)

// runDoctor maps the configuration to doctor's input and prints its
// checks: first every refusal the command named by --for would make
// (config.Validate, the same checks), then Redis, the GitHub App, the
// provider and the webhook secret. Any failure makes the exit code 1.
func runDoctor(ctx context.Context, env *cmdEnv, args []string) error {
	var only, serveURL, forCmd string
	var asJSON bool
	fs := newFlagSet(env, "doctor [--url http://127.0.0.1:8080] [--for serve|worker|all] [--json] [--only ready]",
		"Checks what serve (or --for's command) would refuse to start with, Redis, the GitHub App (its key, id and slug), the LLM provider and the webhook secret, one line each with a fix for what fails; exit 1 if any fails.\n"+
			"--only ready checks Redis and serve's /readyz only: a container healthcheck.")
	var fl config.Flags
	fl.Register(fs, doctorFlags...)
	fs.StringVar(&only, "only", "", "run only this group of checks: ready (Redis, and serve at --url)")
	fs.StringVar(&serveURL, "url", "", "serve's base URL: sends it a signed ping (and checks /readyz with --only ready)")
	fs.StringVar(&forCmd, "for", "serve", "whose refusals to check: serve, worker or all")
	fs.BoolVar(&asJSON, "json", false, `print the checks as one JSON object: {"ok", "failed", "checks": [{"name", "ok", "detail", "fix"}]}`)
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if only != "" && only != "ready" {
		return &usageError{Msg: fmt.Sprintf("--only %q: want ready", only)}
	}
	mode, ok := map[string]config.Mode{"serve": config.ModeServe, "worker": config.ModeWorker, "all": config.ModeAll}[forCmd]
	if !ok {
		return &usageError{Msg: fmt.Sprintf("--for %q: want serve, worker or all", forCmd)}
	}
	if fs.NArg() > 0 {
		return &usageError{Msg: "doctor: takes no arguments; prq doctor --help lists its flags"}
	}
	cfg, err := config.Load(env.getenv, &fl)
	if err != nil {
		return err
	}
	var rdb redis.UniversalClient
	noRedis := doctor.Result{Name: "redis reachable", Detail: "REDIS_URL is not set", Fix: "set REDIS_URL to prq's Redis (redis://host:6379/0)"}
	if cfg.RedisURL != "" {
		noRedis.Detail = "REDIS_URL is not a Redis URL"
		if conn, err := config.ParseRedisURL(cfg.RedisURL); err == nil { // a bad one is also a config line
			c, ok := conn.MakeRedisClient().(redis.UniversalClient)
			if !ok {
				return fmt.Errorf("redis: unexpected client type")
			}
			rdb = c
			defer rdb.Close()
		}
	}
	var rs []doctor.Result
	if only == "ready" {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if rdb == nil {
			rs = append(rs, noRedis)
		}
		rs = append(rs, doctor.Ready(ctx, rdb, nil, serveURL)...)
	} else {
		rs = configResults(cfg, mode, forCmd)
		if rdb == nil {
			rs = append(rs, noRedis)
		}
		in, err := doctorInput(cfg, rdb, serveURL)
		if err != nil {
			return err
		}
		rs = append(rs, doctor.Run(ctx, in)...)
	}
	write := doctor.Write
	if asJSON {
		write = doctor.WriteJSON
	}
	if err := write(env.stdout, rs); err != nil {
		return err
	}
	if doctor.Failed(rs) {
		n := 0
		for _, r := range rs {
			if !r.OK {
				n++
			}
		}
		return fmt.Errorf("doctor: %d of %d checks failed", n, len(rs))
	}
	return nil
}

// configResults are the refusals the command would make, one line each
// (config.Validate for its mode: placeholders and short secrets, a
// missing PRQ_ADMIN_TOKEN off loopback, REDIS_URL, every bad setting).
func configResults(cfg *config.Config, mode config.Mode, forCmd string) []doctor.Result {
	err := cfg.Validate(mode)
	if err == nil {
		return []doctor.Result{{Name: "config", OK: true, Detail: forCmd + " would start with this configuration"}}
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var rs []doctor.Result
	for _, e := range errs {
		r := doctor.Result{Name: "config", Detail: e.Error(), Fix: "correct it: prq config check --for " + forCmd + " names every setting " + forCmd + " refuses"}
		var se *config.SettingError
		if errors.As(e, &se) {
			from := ""
			if se.Source != "" {
				from = " (from " + se.Source + ")"
			}
			r.Name, r.Detail = "config "+se.Name, fmt.Sprintf("%s would not start: %s%s %s", forCmd, se.Name, from, se.Problem)
			r.Fix = "correct " + se.Name + "; prq config check --for " + forCmd + " lists what " + forCmd + " refuses"
			if strings.Contains(se.Problem, "openssl rand") {
				r.Fix = "generate one: openssl rand -hex 32"
			}
		}
		rs = append(rs, r)
	}
	return rs
}

// doctorInput maps the configuration to the checks' input.
func doctorInput(cfg *config.Config, rdb redis.UniversalClient, serveURL string) (doctor.Input, error) {
	in := doctor.Input{Redis: rdb, RedisAllow: doctor.RedisAllow{Eviction: cfg.AllowEviction, NoPersistence: cfg.AllowNoPersistence},
		GitHub: doctor.GitHub{AppID: cfg.GitHub.AppID, PrivateKey: []byte(cfg.GitHub.PrivateKey),
			PrivateKeyPath: cfg.GitHub.PrivateKeyPath, APIURL: cfg.GitHub.APIURL, AppSlug: cfg.GitHub.AppSlug},
		Webhook: doctor.Webhook{Secret: []byte(cfg.GitHub.WebhookSecret), ServeURL: serveURL},
	}
	// the first OpenAI-kind provider is probed on its API (GET
	// /models, a 1-token call); every other provider, Azure and
	// Anthropic included, through prq's own client, each key apart
	var up config.ProviderConfig
	others := map[string][]doctor.Model{}
	for _, m := range cfg.Models {
		p, ok := cfg.ProviderOf(m.Name)
		if !ok {
			continue
		}
		dm, err := llmcall.FromConfig(cfg, m)
		if err != nil { // validated before: a model doctor cannot map is checked by name alone
			dm = doctor.Model{Name: m.Name, Reasoning: m.Reasoning}
		}
		if p.Kind != config.KindOpenAI || (up.Name != "" && p.Name != up.Name) {
			others[p.Name] = append(others[p.Name], dm)
			continue
		}
		up = p
		in.Provider.Models = append(in.Provider.Models, dm)
	}
	for _, p := range cfg.ProviderList() {
		keys := p.KeyValues()
		for i, k := range keys {
			if len(others[p.Name]) == 0 {
				break
			}
			c, err := server.ProviderClient(p, k, 20*time.Second)
			if err != nil {
				return in, err
			}
			call := doctor.Call{Provider: p.Name, Kind: p.Kind, APIKey: k, Client: c, Models: others[p.Name]}
			if len(keys) > 1 {
				call.Key = fmt.Sprintf("key %d, %s", i+1, ratelimit.KeyHash(k))
			}
			in.Calls = append(in.Calls, call)
		}
	}
	in.Provider.BaseURL, in.Provider.APIKey = up.BaseURL, up.Key()
	if keys := up.KeyValues(); len(keys) > 1 {
		in.Provider.MoreKeys = keys[1:]
	}
	return in, nil
}
