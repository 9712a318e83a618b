package ratelimit_test

import (
	"os"
	"testing"

	"github.com/prq-dev/prq/internal/redistest"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelperProcess())
	}
	code := m.Run()
	redistest.StopShared()
	os.Exit(code)
}
