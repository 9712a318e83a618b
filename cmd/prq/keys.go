package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"

	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/gateway"
	"github.com/prq-dev/prq/internal/logging"
	"github.com/prq-dev/prq/internal/server"
	"github.com/prq-dev/prq/ratelimit"
)

func runGateway(ctx context.Context, env *cmdEnv, args []string) error {
	var admit bool
	cfg, help, err := setup(env, "gateway", "Serves only the LLM gateway (/v1/chat/completions, /v1/responses, /v1/embeddings, /v1/messages, /v1/models), stateless like serve: run as many as needed. Its requests are admitted by the workers' admission loops, in the same order as PR jobs.", config.ModeCheck, args,
		func(fs *flag.FlagSet) {
			fs.BoolVar(&admit, "admit", false, "also run an admission loop here, for a gateway without prq workers (with workers, leave it off)")
		})
	if help || err != nil {
		return err
	}
	return server.RunGateway(ctx, cfg, admit, env.stdout, env.stderr)
}

const keysUsage = "prq keys create NAME [--tier chat|paid|trial|free] [--quota-tokens N] [--quota-dollars D] [--quota-period hour|day|week|month] [--tpm N] [--models a,b] | list | revoke ID | rotate ID"

func runKeys(ctx context.Context, env *cmdEnv, args []string) error {
	if len(args) == 0 {
		return &usageError{Msg: keysUsage}
	}
	sub, rest := args[0], args[1:]
	var pos []string
	for len(rest) > 0 && !strings.HasPrefix(rest[0], "-") { // NAME or ID before the flags
		pos, rest = append(pos, rest[0]), rest[1:]
	}
	fs := newFlagSet(env, "keys "+sub, keysUsage)
	var fl config.Flags
	fl.Register(fs)
	var spec gateway.Spec
	var period, models string
	fs.StringVar(&spec.Tier, "tier", "free", "admission class of the key's requests: chat, paid, trial or free")
	fs.Int64Var(&spec.QuotaTokens, "quota-tokens", 0, "tokens (input + output) per period; 0: no quota")
	fs.Float64Var(&spec.QuotaDollars, "quota-dollars", 0, "US dollars per period at the models' prices (models[].prices); 0: no quota")
	fs.StringVar(&period, "quota-period", "day", "hour, day, week or month (UTC calendar windows)")
	fs.Int64Var(&spec.TPM, "tpm", 0, "tokens per minute for this key; 0: none")
	fs.StringVar(&models, "models", "", "models the key may use, comma-separated; empty: all")
	if help, err := parseFlags(fs, rest); help || err != nil {
		return err
	}
	pos = append(pos, fs.Args()...)
	cfg, err := config.Load(env.getenv, &fl)
	if err != nil {
		return err
	}
	if cfg.RedisURL == "" {
		return &config.SettingError{Name: "REDIS_URL", Problem: "is required"}
	}
	conn, err := config.ParseRedisURL(cfg.RedisURL)
	if err != nil {
		return &config.SettingError{Name: "REDIS_URL", Problem: err.Error()}
	}
	rdb, err := server.Open(ctx, conn, server.RedisChecks{AllowEviction: true, AllowNoPersistence: true}, logging.New(env.stderr, cfg.Log)) // only keys are written
	if err != nil {
		return err
	}
	defer rdb.Close()
	ks := gateway.NewKeys(rdb)
	enc := json.NewEncoder(env.stdout)
	enc.SetIndent("", "  ")
	one := func() (string, error) {
		if len(pos) != 1 {
			return "", &usageError{Msg: keysUsage}
		}
		return pos[0], nil
	}
	switch sub {
	case "create":
		if spec.Name, err = one(); err != nil {
			return err
		}
		spec.QuotaPeriod = ratelimit.Period(period)
		for _, m := range strings.Split(models, ",") {
			if m = strings.TrimSpace(m); m != "" {
				spec.Models = append(spec.Models, m)
			}
		}
		secret, k, err := ks.Create(ctx, spec)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.stderr, "prq: key %s created; it is shown once, store it now\n", k.ID)
		return enc.Encode(map[string]any{"key": secret, "record": k})
	case "list":
		keys, err := ks.List(ctx)
		if err != nil {
			return err
		}
		return enc.Encode(keys)
	case "revoke":
		id, err := one()
		if err != nil {
			return err
		}
		k, err := ks.Revoke(ctx, id)
		if err != nil {
			return err
		}
		return enc.Encode(k)
	case "rotate":
		id, err := one()
		if err != nil {
			return err
		}
		secret, k, err := ks.Rotate(ctx, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.stderr, "prq: key %s rotated; the old secret no longer works; the new one is shown once\n", k.ID)
		return enc.Encode(map[string]any{"key": secret, "record": k})
	}
	return &usageError{Msg: keysUsage}
}
