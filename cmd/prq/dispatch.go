package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/prq-dev/prq/internal/config"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// usageError is a command-line mistake: exit code 2.
type usageError = config.UsageError

func exitCode(err error) int {
	var u *usageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}

type command struct {
	summary string
	run     func(ctx context.Context, env *cmdEnv, args []string) error
}

// cmdEnv is what every command gets: environment lookup and output.
type cmdEnv struct {
	getenv         func(string) string
	stdout, stderr io.Writer
}

func commands() map[string]command {
	return map[string]command{
		"serve":        {"run the webhook receiver, dashboard, asynq web UI, metrics and admin API", runServe},
		"worker":       {"run jobs: admission, summaries, reviews, chat and publishing", runWorker},
		"all":          {"serve and worker in one process", runAll},
		"demo":         {"run everything on an embedded default: no Redis, GitHub or OpenAI account needed", runDemo},
		"config":       {"config check: validate and print the effective configuration, secrets redacted; config reference: every setting as Markdown", runConfig},
		"doctor":       {"check Redis, the GitHub App, the provider and the webhook secret; --only ready for healthchecks", runDoctor},
		"fake":         {"fake github|openai: run a faithful fake of the GitHub API or an OpenAI-compatible provider", runFake},
		"plan":         {"plan set|get|list: an installation's plan tier", runPlan},
		"gateway":      {"serve only the OpenAI-compatible LLM gateway (/v1/chat/completions, /v1/models)", runGateway},
		"keys":         {"keys create|list|revoke|rotate: the gateway's virtual keys", runKeys},
		"setup":        {"setup github: register prq's GitHub App (GitHub's manifest flow) and write its env and key files", runSetup},
		"version":      {"print the version", runVersion},
		"bench":        {"prq against today's alternatives on the same workload, side by side: table, JSON, SVG", runBench},
		"bench-worker": {"a worker process of prq bench (internal)", runBenchWorker},
		"chaos":        {"prove it survives: kill -9, SIGSTOP and Redis restarts under load; prints the figures", runChaos},
	}
}

// run is prq's whole program; main only adds signals and the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	env := &cmdEnv{getenv: getenv, stdout: stdout, stderr: stderr}
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(stdout, cmds)
		if len(args) == 0 {
			return &usageError{Msg: "no command given"}
		}
		return nil
	}
	c, ok := cmds[args[0]]
	if !ok {
		printUsage(stderr, cmds)
		return &usageError{Msg: fmt.Sprintf("unknown command %q", args[0])}
	}
	return c.run(ctx, env, args[1:])
}

func printUsage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "prq: a durable job queue and worker pool for LLM pull-request review")
	fmt.Fprintln(w, "\nUsage: prq <command> [flags]   (prq <command> --help for its flags)")
	fmt.Fprintln(w, "\nCommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, cmds[n].summary)
	}
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(env *cmdEnv, name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.Usage = func() {
		fmt.Fprintf(env.stderr, "Usage: prq %s\n\n%s\n\nFlags:\n", name, usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; --help is not an error.
func parseFlags(fs *flag.FlagSet, args []string) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, &usageError{Msg: err.Error()}
	}
	return false, nil
}

func runVersion(_ context.Context, env *cmdEnv, args []string) error {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v = "dev-" + s.Value[:12]
			}
		}
	}
	fmt.Fprintln(env.stdout, "prq", v)
	return nil
}

func runConfig(_ context.Context, env *cmdEnv, args []string) error {
	if len(args) > 0 && args[0] == "reference" {
		return runConfigReference(env, args[1:])
	}
	fs := newFlagSet(env, "config check [--for serve|worker|all|demo]", "Validates the configuration (file, environment, flags) and prints the effective configuration with every secret redacted.")
	var fl config.Flags
	fl.Register(fs)
	forMode := fs.String("for", "", "also check what this command needs: serve, worker, all or demo")
	if len(args) == 0 || args[0] != "check" {
		fs.Usage()
		return &usageError{Msg: "usage: prq config check|reference"}
	}
	if help, err := parseFlags(fs, args[1:]); help || err != nil {
		return err
	}
	m := map[string]config.Mode{"": config.ModeCheck, "serve": config.ModeServe, "worker": config.ModeWorker, "all": config.ModeAll, "demo": config.ModeDemo}
	md, ok := m[*forMode]
	if !ok {
		return &usageError{Msg: fmt.Sprintf("--for %q: want serve, worker, all or demo", *forMode)}
	}
	cfg, err := config.Load(env.getenv, &fl)
	if err != nil {
		return err
	}
	if err := cfg.Validate(md); err != nil {
		return fmt.Errorf("invalid configuration:\n  %s", strings.ReplaceAll(err.Error(), "\n", "\n  "))
	}
	fmt.Fprint(env.stdout, cfg.Redacted())
	return nil
}

// runConfigReference prints every setting as Markdown, made from the
// definitions alone: the environment does not change it.
func runConfigReference(env *cmdEnv, args []string) error {
	fs := newFlagSet(env, "config reference", "Prints every setting (name, type, default, environment variable, flag, meaning) as Markdown: docs/configuration.md is its output ("+config.ReferenceCommand+").")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &usageError{Msg: "usage: prq config reference (no arguments)"}
	}
	return config.Reference(env.stdout)
}
