package gateway_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/prq-dev/prq/internal/redistest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared()
	if code == 0 {
		// the admission loops and waiters end with their contexts
		if err := goleak.Find(goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"), goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
