package config

import (
	"fmt"
	"log/slog"
	"strings"
)

// UsageError is a command-line mistake (a bad flag or argument): the
// command exits with code 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// ParseLevel parses a log level: debug, info, warn or error.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%q: want debug, info, warn or error", s)
	}
	return l, nil
}

// SplitList splits a comma-separated flag value, dropping empty items.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
