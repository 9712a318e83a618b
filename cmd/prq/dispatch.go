package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/prq-dev/prq/internal/config"
)

// version, commit and date are set at build time (the Dockerfile,
// release builds): go build -ldflags "-X main.version=v1.2.0 -X
// main.commit=$(git rev-parse HEAD) -X main.date=$(date -u +%Y-%m-%dT%H:%M:%SZ)".
// Unset, runVersion reads the module version and the VCS stamp Go
// records in the binary (debug.ReadBuildInfo).
var version, commit, date = "", "", ""

// usageError is a command-line mistake: exit code 2.
type usageError = config.UsageError

// Exit codes: 0 success (help included), 1 a failure (a bad setting,
// an unreachable Redis, a failed check), 2 a command-line mistake.
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
		"doctor":       {"check what serve would refuse, Redis, the GitHub App, the provider and the webhook secret; --only ready for healthchecks", runDoctor},
		"fake":         {"fake github|gitlab|openai: run a faithful fake of the GitHub API, the GitLab API or an OpenAI-compatible provider", runFake},
		"plan":         {"plan set|get|list: an installation's plan tier", runPlan},
		"gateway":      {"serve only the OpenAI-compatible LLM gateway (/v1/chat/completions, /v1/models)", runGateway},
		"keys":         {"keys create|list|revoke|rotate: the gateway's virtual keys", runKeys},
		"setup":        {"setup github: register prq's GitHub App (GitHub's manifest flow) and write its env and key files", runSetup},
		"version":      {"print the version, commit and build date (also prq --version)", runVersion},
		"bench":        {"prq against today's alternatives on the same workload, side by side: table, JSON, SVG", runBench},
		"bench-worker": {"a worker process of prq bench (internal)", runBenchWorker},
		"chaos":        {"prove it survives: kill -9, SIGSTOP and Redis restarts under load; prints the figures", runChaos},
	}
}

// hidden commands run but are not listed: other prq processes start them.
var hidden = map[string]bool{"bench-worker": true}

// run is prq's whole program; main only adds signals and the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	env := &cmdEnv{getenv: getenv, stdout: stdout, stderr: stderr}
	cmds := commands()
	if len(args) == 0 {
		printUsage(stderr, cmds)
		return &usageError{Msg: "no command given"}
	}
	switch args[0] {
	case "-h", "-help", "--help":
		printUsage(stdout, cmds)
		return nil
	case "help": // prq help [command]: the command's own help
		if len(args) == 1 {
			printUsage(stdout, cmds)
			return nil
		}
		return run(ctx, []string{args[1], "--help"}, getenv, stdout, stderr)
	case "-v", "-version", "--version":
		return runVersion(ctx, env, args[1:])
	}
	c, ok := cmds[args[0]]
	if !ok {
		return &usageError{Msg: fmt.Sprintf("unknown command %q%s; prq --help lists the commands", args[0], suggest(args[0], cmds))}
	}
	return c.run(ctx, env, args[1:])
}

// suggest names the command nearest to a mistyped one, if any is near.
func suggest(name string, cmds map[string]command) string {
	var names []string
	for n := range cmds {
		if !hidden[n] {
			names = append(names, n)
		}
	}
	if s := config.Nearest(name, names); s != "" {
		return fmt.Sprintf(" (did you mean %s?)", s)
	}
	return ""
}

func printUsage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "prq: a durable job queue and worker pool for LLM pull-request review")
	fmt.Fprintln(w, "\nUsage: prq <command> [flags]   (prq <command> --help for its flags)")
	fmt.Fprintln(w, "\nCommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		if !hidden[n] {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nFlags:\n  -h, --help     this help (prq <command> --help: the command's)\n  -v, --version  the version, commit and build date")
	fmt.Fprintln(w, "\nExit codes: 0 success, 1 failure, 2 a command-line mistake.")
}

// flagOutput is a flag set's output: it drops what the flag package
// writes (parseFlags reports errors, and prints help where it belongs),
// and keeps the command's name and usage text.
type flagOutput struct {
	env         *cmdEnv
	name, usage string
	parsing     bool
}

func (o *flagOutput) Write(p []byte) (int, error) { return len(p), nil }

// print writes the command's usage and flags to w.
func (o *flagOutput) print(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: prq %s\n\n%s\n", o.name, o.usage)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprint(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(o)
	}
}

// newFlagSet returns a flag set that reports errors instead of exiting:
// parseFlags prints --help on stdout; fs.Usage() prints on stderr.
func newFlagSet(env *cmdEnv, name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	o := &flagOutput{env: env, name: name, usage: usage}
	fs.SetOutput(o)
	fs.Usage = func() {
		if !o.parsing { // the flag package calls it on -h and on errors: parseFlags handles both
			o.print(env.stderr, fs)
		}
	}
	return fs
}

// parseFlags parses args; -h or --help prints the usage on stdout and is
// not an error; a bad flag is a usage error (exit 2).
func parseFlags(fs *flag.FlagSet, args []string) (help bool, err error) {
	o, _ := fs.Output().(*flagOutput)
	if o != nil {
		o.parsing = true
	}
	err = fs.Parse(args)
	if o != nil {
		o.parsing = false
	}
	if err == nil {
		return false, nil
	}
	if o == nil {
		return false, &usageError{Msg: err.Error()}
	}
	if errors.Is(err, flag.ErrHelp) {
		o.print(o.env.stdout, fs)
		return true, nil
	}
	cmd := firstWords(o.name)
	return false, &usageError{Msg: fmt.Sprintf("%s: %v; prq %s --help lists its flags", cmd, err, cmd)}
}

// firstWords is a usage line's command: "keys create NAME" -> "keys create".
func firstWords(s string) string {
	var out []string
	for _, w := range strings.Fields(s) {
		if w == "" || strings.ToLower(w) != w || strings.ContainsAny(w, "[<|-") {
			break
		}
		out = append(out, w)
	}
	return strings.Join(out, " ")
}

// isHelp reports whether args ask for help before any subcommand.
func isHelp(args []string) bool {
	return len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help")
}

// buildInfo is the version, commit and build date: what the build
// stamped, else what Go recorded in the binary.
func buildInfo() (v, rev, when string, modified bool) {
	v, rev, when = version, commit, date
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if rev == "" {
					rev = s.Value
				}
			case "vcs.time":
				if when == "" {
					when = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true" && commit == ""
			}
		}
	}
	if v == "" {
		v = "dev"
	}
	return v, rev, when, modified
}

func runVersion(_ context.Context, env *cmdEnv, args []string) error {
	fs := newFlagSet(env, "version", "Prints the version, the commit it was built from and the build date (also: prq --version).")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &usageError{Msg: "version: takes no arguments"}
	}
	v, rev, when, modified := buildInfo()
	if rev == "" {
		rev = "unknown"
	} else if modified {
		rev += " (modified)"
	}
	if when == "" {
		when = "unknown"
	}
	fmt.Fprintf(env.stdout, "prq %s\ncommit %s\nbuilt %s\n%s\n", v, rev, when, runtime.Version())
	return nil
}

func runConfig(_ context.Context, env *cmdEnv, args []string) error {
	if len(args) > 0 && args[0] == "reference" {
		return runConfigReference(env, args[1:])
	}
	fs := newFlagSet(env, "config check [--for serve|worker|all|demo] [--diff-defaults]", "Validates the configuration (file, environment, flags) and prints the effective configuration, defaults filled in and every secret redacted.\nprq config reference prints every setting as Markdown.")
	var fl config.Flags
	fl.Register(fs)
	forMode := fs.String("for", "", "also check what this command needs: serve, worker, all or demo")
	diff := fs.Bool("diff-defaults", false, "print only the settings that differ from the defaults")
	if isHelp(args) {
		_, err := parseFlags(fs, []string{"--help"})
		return err
	}
	if len(args) == 0 || args[0] != "check" {
		fs.Usage()
		return &usageError{Msg: "usage: prq config check|reference; prq config --help lists the flags"}
	}
	if help, err := parseFlags(fs, args[1:]); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &usageError{Msg: "config check: takes no arguments; prq config check --help lists its flags"}
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
	if *diff {
		out, err := cfg.DiffDefaults()
		if err != nil {
			return err
		}
		fmt.Fprint(env.stdout, out)
		return nil
	}
	fmt.Fprint(env.stdout, cfg.Effective().Redacted())
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
