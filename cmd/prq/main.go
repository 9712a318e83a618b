// Command prq is the one binary of prq: the webhook receiver and
// dashboard (serve), the job workers (worker), both (all), the demo, the
// fake GitHub and OpenAI servers, the benchmark and admin commands.
//
// This package is the command line only: it parses flags and the
// configuration (internal/config), picks the command and hands off to the
// package that does the work (internal/server, internal/demo,
// internal/bench, internal/chaos, internal/harness for the fakes).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "prq:", err)
		os.Exit(exitCode(err))
	}
}
