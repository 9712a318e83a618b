package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/doctor"
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
		})
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
		// doctor probes an OpenAI-compatible API: the first OpenAI-kind
		// provider's models (Azure and Anthropic are not probed yet)
		var up config.ProviderConfig
		for _, m := range cfg.Models {
			p, ok := cfg.ProviderOf(m.Name)
			if !ok || p.Kind != config.KindOpenAI || (up.Name != "" && p.Name != up.Name) {
				continue
			}
			up = p
			dm := doctor.Model{Name: m.Name, Reasoning: m.Reasoning}
			if l, err := m.Limits(); err == nil { // doctor compares per minute
				dm.RequestsPerMinute = l.RequestsPerPeriod * int64(time.Minute) / int64(l.Period)
				dm.TokensPerMinute = l.TokensPerPeriod * int64(time.Minute) / int64(l.Period)
			}
			in.Provider.Models = append(in.Provider.Models, dm)
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
