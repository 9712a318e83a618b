package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/prq-dev/prq/internal/appmanifest"
)

// runSetup is `prq setup github`: the flags of the App manifest flow,
// handed to internal/appmanifest.
func runSetup(ctx context.Context, env *cmdEnv, args []string) error {
	usage := "Registers prq's GitHub App with GitHub's App manifest flow: serves a page on this machine that sends\n" +
		"github-app-manifest.json to GitHub, where you confirm; then writes the App's id, slug, webhook secret and\n" +
		"key path to --env-file and its private key to --key-file (both mode 0600) and prints the App's install link.\n" +
		"Secrets are never printed."
	fs := newFlagSet(env, "setup github --webhook-url https://HOST/webhook [--org ORG]", usage)
	var cfg appmanifest.Config
	fs.StringVar(&cfg.WebhookURL, "webhook-url", "", "where GitHub sends webhooks: serve's /webhook, reachable from GitHub (required; a bare host gets /webhook)")
	fs.StringVar(&cfg.Name, "name", "", "the App's name, unique on GitHub (default: the manifest's, \"prq\"; GitHub's page lets you change it)")
	fs.StringVar(&cfg.Org, "org", "", "register the App for this organisation (default: your user account)")
	fs.StringVar(&cfg.GitHubURL, "github-url", appmanifest.DefaultGitHubURL, "GitHub's web address; an Enterprise Server's is https://HOST")
	fs.StringVar(&cfg.APIURL, "api-url", "", "GitHub's REST API (default: https://api.github.com/, or --github-url/api/v3/ for an Enterprise Server)")
	port := fs.Int("port", 0, "the local page's port on 127.0.0.1 (default: a free one)")
	fs.StringVar(&cfg.EnvFile, "env-file", appmanifest.DefaultEnvFile, "the env file to write the App's settings to")
	fs.StringVar(&cfg.KeyFile, "key-file", appmanifest.DefaultKeyFile, "the file to write the App's private key to")
	fs.StringVar(&cfg.KeyPath, "key-path", "", "GITHUB_PRIVATE_KEY_PATH in the env file (default: /secrets/NAME for a key in ./secrets, docker compose's mount; else the key file's absolute path)")
	fs.BoolVar(&cfg.Force, "force", false, "replace an existing key file, and update an existing env file's GitHub settings (its other lines are kept)")
	fs.DurationVar(&cfg.Timeout, "timeout", appmanifest.DefaultTimeout, "how long to wait for GitHub's redirect")
	if len(args) == 0 || args[0] != "github" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			_, err := parseFlags(fs, args[:1]) // help, as every command gives it
			return err
		}
		return &usageError{Msg: "usage: prq setup github --webhook-url https://HOST/webhook (prq setup --help)"}
	}
	if help, err := parseFlags(fs, args[1:]); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &usageError{Msg: fmt.Sprintf("unexpected argument %q (flags only)", fs.Arg(0))}
	}
	if *port < 0 || *port > 65535 {
		return &usageError{Msg: fmt.Sprintf("--port %d: want 0 (a free port) to 65535", *port)}
	}
	cfg.Addr = "127.0.0.1:" + strconv.Itoa(*port)
	if err := cfg.Check(); err != nil {
		return &usageError{Msg: err.Error()}
	}
	cfg.ReadyFunc = func(page string) {
		fmt.Fprintf(env.stderr, "Open %s in a browser on this machine: it sends prq's App manifest to %s, where you confirm.\n"+
			"Waiting up to %s for GitHub to send you back (Ctrl-C stops; nothing is written until then).\n", page, cfg.GitHubURL, cfg.Timeout)
	}
	res, err := appmanifest.Run(ctx, cfg)
	if err != nil {
		return err
	}
	printSetup(env, res)
	return nil
}

func printSetup(env *cmdEnv, res *appmanifest.Result) {
	w := env.stdout
	fmt.Fprintf(w, "Registered the GitHub App %q (id %d, slug %s, owner %s): %s\n", res.Name, res.AppID, res.Slug, res.Owner, res.HTMLURL)
	verb := "Wrote"
	if res.EnvFileUpdated {
		verb = "Updated"
	}
	secret := ", GITHUB_WEBHOOK_SECRET"
	if !res.HasWebhookSecret {
		secret = ""
	}
	fmt.Fprintf(w, "%s %s (GITHUB_APP_ID, GITHUB_APP_SLUG, GITHUB_PRIVATE_KEY_PATH=%s%s, GITHUB_API_URL) and %s, mode 0600.\n",
		verb, res.EnvFile, res.KeyPath, secret, res.KeyFile)
	if !res.HasWebhookSecret {
		fmt.Fprintf(w, "GitHub sent no webhook secret: set one in the App's settings on GitHub and as GITHUB_WEBHOOK_SECRET in %s.\n", res.EnvFile)
	}
	if strings.HasPrefix(res.KeyPath, "/secrets/") {
		fmt.Fprintf(w, "docker compose runs prq as uid 65532 (the image's nonroot user): on Linux give it the key, keeping mode 0600:\n  sudo chown 65532 %s\n", res.KeyFile)
	}
	fmt.Fprintf(w, "Next: add OPENAI_API_KEY and PRQ_ADMIN_TOKEN to %s (docs/getting-started.md), start prq, and install the App:\n  %s\n",
		res.EnvFile, res.InstallURL)
}
