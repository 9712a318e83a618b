// Package logging builds prq's structured logger (log/slog, text or JSON)
// from the configuration and adapts it to asynq's Logger interface. It
// does not decide what is logged.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/prq-dev/prq/internal/config"
)

// New returns the process's logger: text or JSON at the configured level.
func New(w io.Writer, c config.LogConfig) *slog.Logger {
	level, _ := config.ParseLevel(c.Level)
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// Asynq makes asynq's lines structured: it implements asynq.Logger.
type Asynq struct{ Log *slog.Logger }

func (l Asynq) emit(level slog.Level, args []any) {
	msg := strings.TrimSpace(fmt.Sprint(args...))
	if level == slog.LevelWarn && strings.HasPrefix(msg, janitorWarning) {
		return
	}
	l.Log.Log(context.Background(), level, msg, "component", "asynq")
}

// janitorWarning begins the warning asynq's NewServer gives for a
// JanitorBatchSize over its default of 100. prq's worker chooses 500
// every 30s (one script call a queue deleting up to 500 expired
// completed tasks) over 100 every 6s, to poll Redis a fifth as often;
// the warning, on every worker start, says nothing an operator can act
// on.
const janitorWarning = "Janitor batch size of "

// Debug logs at debug level.
func (l Asynq) Debug(args ...any) { l.emit(slog.LevelDebug, args) }

// Info logs at info level.
func (l Asynq) Info(args ...any) { l.emit(slog.LevelInfo, args) }

// Warn logs at warn level.
func (l Asynq) Warn(args ...any) { l.emit(slog.LevelWarn, args) }

// Error logs at error level.
func (l Asynq) Error(args ...any) { l.emit(slog.LevelError, args) }

// Fatal logs and exits, as asynq's contract for Fatal requires.
func (l Asynq) Fatal(args ...any) {
	l.emit(slog.LevelError, args)
	os.Exit(1)
}
