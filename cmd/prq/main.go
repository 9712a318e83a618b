// Command prq is the one binary of prq: the webhook receiver and
// dashboard (serve), the job workers (worker), both (all), the demo, the
// fake GitHub and OpenAI servers, the benchmark and admin commands.
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
