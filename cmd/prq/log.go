package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%q: want debug, info, warn or error", s)
	}
	return l, nil
}

func newLogger(w io.Writer, c LogConfig) *slog.Logger {
	level, _ := parseLevel(c.Level)
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// asynqLogger makes asynq's lines structured: it implements asynq.Logger.
type asynqLogger struct{ log *slog.Logger }

func (l asynqLogger) emit(level slog.Level, args []any) {
	l.log.Log(context.Background(), level, strings.TrimSpace(fmt.Sprint(args...)), "component", "asynq")
}

func (l asynqLogger) Debug(args ...any) { l.emit(slog.LevelDebug, args) }
func (l asynqLogger) Info(args ...any)  { l.emit(slog.LevelInfo, args) }
func (l asynqLogger) Warn(args ...any)  { l.emit(slog.LevelWarn, args) }
func (l asynqLogger) Error(args ...any) { l.emit(slog.LevelError, args) }

// Fatal logs and exits, as asynq's contract for Fatal requires.
func (l asynqLogger) Fatal(args ...any) {
	l.emit(slog.LevelError, args)
	os.Exit(1)
}
