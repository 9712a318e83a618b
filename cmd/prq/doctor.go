package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/doctor"
	"github.com/prq-dev/prq/internal/server"
	"github.com/prq-dev/prq/ratelimit"
)

// runDoctor maps the configuration to doctor's input and prints its
// checks; any failure makes the exit code 1.
func runDoctor(ctx context.Context, env *cmdEnv, args []string) error {
	var only, serveURL string
	cfg, help, err := setup(env, "doctor [--url http://127.0.0.1:8080] [--only ready]",
		"Checks Redis, the GitHub App, the LLM provider and the webhook secret, one line each with a fix for what fails.\n"+
			"--only ready checks Redis and serve's /readyz only: a container healthcheck.",
		config.ModeCheck, args, func(fs *flag.FlagSet) {
			fs.StringVar(&only, "only", "", "run only this group of checks: ready (Redis, and serve at --url)")
			fs.StringVar(&serveURL, "url", "", "serve's base URL: sends it a signed ping (and checks /readyz with --only ready)")
		}, redisFlags...)
	if help || err != nil {
		return err
	}
	if only != "" && only != "ready" {
		return &usageError{Msg: fmt.Sprintf("--only %q: want ready", only)}
	}
	var rdb redis.UniversalClient
	if cfg.RedisURL != "" {
		conn, err := config.ParseRedisURL(cfg.RedisURL)
		if err != nil {
			return &config.SettingError{Name: "REDIS_URL", Problem: err.Error()}
		}
		c, ok := conn.MakeRedisClient().(redis.UniversalClient)
		if !ok {
			return fmt.Errorf("redis: unexpected client type")
		}
		rdb = c
		defer rdb.Close()
	}
	var rs []doctor.Result
	if only == "ready" {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if rdb == nil {
			rs = append(rs, doctor.Result{Name: "redis reachable", Detail: "REDIS_URL is not set", Fix: "set REDIS_URL"})
		}
		rs = append(rs, doctor.Ready(ctx, rdb, nil, serveURL)...)
	} else {
		in := doctor.Input{Redis: rdb,
			GitHub: doctor.GitHub{AppID: cfg.GitHub.AppID, PrivateKey: []byte(cfg.GitHub.PrivateKey),
				PrivateKeyPath: cfg.GitHub.PrivateKeyPath, APIURL: cfg.GitHub.APIURL},
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
			dm := doctor.Model{Name: m.Name, Reasoning: m.Reasoning}
			if l, err := m.Limits(); err == nil { // doctor compares per minute
				perMinute := func(n int64) int64 { return n * int64(time.Minute) / int64(l.Period) }
				dm.RequestsPerMinute, dm.TokensPerMinute = perMinute(l.RequestsPerPeriod), perMinute(l.TokensPerPeriod)
				dm.InputTokensPerMinute, dm.OutputTokensPerMinute = perMinute(l.InputTokensPerPeriod), perMinute(l.OutputTokensPerPeriod)
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
					return err
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
		if rdb == nil {
			rs = append(rs, doctor.Result{Name: "redis reachable", Detail: "REDIS_URL is not set", Fix: "set REDIS_URL to prq's Redis (redis://host:6379/0)"})
		}
		rs = append(rs, doctor.Run(ctx, in)...)
	}
	if err := doctor.Write(env.stdout, rs); err != nil {
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
