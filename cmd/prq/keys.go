package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
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
		}, gatewayFlags...)
	if help || err != nil {
		return err
	}
	return server.RunGateway(ctx, cfg, admit, env.stdout, env.stderr)
}

const keysUsage = "prq keys create NAME [--tier chat|paid|trial|free] [--quota-tokens N] [--quota-dollars D] [--quota-period hour|day|week|month] [--tpm N] [--models a,b] | list | revoke ID|NAME | rotate ID|NAME"

const keysHelp = "Manages the LLM gateway's virtual keys in Redis (REDIS_URL). A key's name is unique among the keys not revoked; revoke and rotate take its id or that name."

func runKeys(ctx context.Context, env *cmdEnv, args []string) error {
	if len(args) == 0 {
		return &usageError{Msg: "usage: " + keysUsage}
	}
	sub, rest := args[0], args[1:]
	if isHelp(args) {
		sub, rest = strings.TrimPrefix(keysUsage, "prq keys "), []string{"--help"}
	} else if sub != "create" && sub != "list" && sub != "revoke" && sub != "rotate" {
		return &usageError{Msg: fmt.Sprintf("keys: unknown subcommand %q; usage: %s", sub, keysUsage)}
	}
	var pos []string
	for len(rest) > 0 && !strings.HasPrefix(rest[0], "-") { // NAME or ID before the flags
		pos, rest = append(pos, rest[0]), rest[1:]
	}
	fs := newFlagSet(env, "keys "+sub+keysArgs[sub], keysHelp)
	var fl config.Flags
	fl.Register(fs, redisFlags...)
	var spec gateway.Spec
	var period, models string
	if sub == "create" || isHelp(args) { // keys --help: every subcommand's flags
		fs.StringVar(&spec.Tier, "tier", "free", "create: admission class of the key's requests: chat, paid, trial or free")
		fs.Int64Var(&spec.QuotaTokens, "quota-tokens", 0, "create: tokens (input + output) per period; 0: no quota")
		fs.Float64Var(&spec.QuotaDollars, "quota-dollars", 0, "create: US dollars per period at the models' prices (models[].prices); 0: no quota")
		fs.StringVar(&period, "quota-period", "day", "create: hour, day, week or month (UTC calendar windows)")
		fs.Int64Var(&spec.TPM, "tpm", 0, "create: tokens per minute for this key; 0: none")
		fs.StringVar(&models, "models", "", "create: configured models the key may use, comma-separated; empty: all")
	}
	if help, err := parseFlags(fs, rest); help || err != nil {
		return err
	}
	pos = append(pos, fs.Args()...)
	cfg, err := config.Load(env.getenv, &fl)
	if err != nil {
		return err
	}
	if sub == "create" {
		if err := checkKeySpec(cfg, &spec, models); err != nil {
			return err
		}
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
	return keysDo(ctx, env, gateway.NewKeys(rdb), sub, pos, spec, period)
}

// keysArgs are each subcommand's arguments, for its usage line.
var keysArgs = map[string]string{"create": " NAME [flags]", "list": "", "revoke": " ID|NAME", "rotate": " ID|NAME"}

// checkKeySpec refuses, before Redis is touched, a tier or a model a
// key cannot have: a usage error (exit 2).
func checkKeySpec(cfg *config.Config, spec *gateway.Spec, models string) error {
	if !slices.Contains(gateway.Tiers, spec.Tier) {
		return &usageError{Msg: fmt.Sprintf("--tier %q: want chat, paid, trial or free", spec.Tier)}
	}
	names := cfg.ModelNames()
	for _, m := range config.SplitList(models) {
		if !slices.Contains(names, m) {
			hint := ""
			if s := config.Nearest(m, names); s != "" {
				hint = fmt.Sprintf("did you mean %s? ", s)
			}
			return &usageError{Msg: fmt.Sprintf("--models: %q is not a configured model (%sconfigured: %s)", m, hint, strings.Join(names, ", "))}
		}
		spec.Models = append(spec.Models, m)
	}
	return nil
}

// keysDo runs a keys subcommand against the store; each prints JSON.
func keysDo(ctx context.Context, env *cmdEnv, ks *gateway.Keys, sub string, pos []string, spec gateway.Spec, period string) error {
	enc := json.NewEncoder(env.stdout)
	enc.SetIndent("", "  ")
	if (sub == "list") != (len(pos) == 0) || len(pos) > 1 {
		return &usageError{Msg: "usage: " + keysUsage}
	}
	switch sub {
	case "create":
		spec.Name = pos[0]
		spec.QuotaPeriod = ratelimit.Period(period)
		secret, k, err := ks.CreateUnique(ctx, spec)
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
	}
	id, err := ks.Resolve(ctx, pos[0])
	if err != nil {
		return err
	}
	if sub == "revoke" {
		k, err := ks.Revoke(ctx, id)
		if err != nil {
			return err
		}
		return enc.Encode(k)
	}
	secret, k, err := ks.Rotate(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stderr, "prq: key %s rotated; the old secret no longer works; the new one is shown once\n", k.ID)
	return enc.Encode(map[string]any{"key": secret, "record": k})
}
