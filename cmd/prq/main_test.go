package main

import (
	"os"
	"testing"

	"github.com/prq-dev/prq/internal/redistest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared()
	os.Exit(code)
}
