package doctor_test

import (
	"os"

	"github.com/prq-dev/prq/internal/doctor"
)

// Write prints one line per check; a failure carries its fix.
func ExampleWrite() {
	doctor.Write(os.Stdout, []doctor.Result{
		{Name: "redis reachable", OK: true, Detail: "PING answered in 1ms"},
		{Name: "redis eviction", Detail: "maxmemory-policy is allkeys-lru", Fix: "set maxmemory-policy noeviction"},
	})
	// Output:
	// ok    redis reachable  PING answered in 1ms
	// FAIL  redis eviction   maxmemory-policy is allkeys-lru; fix: set maxmemory-policy noeviction
}
