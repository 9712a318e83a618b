package bench

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// clockTicks is Linux's USER_HZ, the unit of /proc's CPU times (100 on
// every architecture Go supports).
const clockTicks = 100

// procCPU is the CPU time (user + system, all threads) a process has
// used, from /proc/<pid>/stat ("self" for this one).
func procCPU(pid string) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	return parseProcStat(string(b))
}

// parseProcStat reads utime and stime (fields 14 and 15) of a
// /proc/<pid>/stat line; the command name (field 2) may hold spaces and
// parentheses, so fields are counted from its closing parenthesis.
func parseProcStat(s string) (time.Duration, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc stat: no command name in %q", s)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): utime is field 14, stime 15
	if len(f) < 13 {
		return 0, fmt.Errorf("proc stat: %d fields after the name, want at least 13", len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("proc stat: utime %q stime %q", f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// machineCPU is the machine's CPU time so far: busy and total, summed
// over every core, from the first line of /proc/stat. Idle and iowait
// count as not busy.
type machineCPU struct{ busy, total time.Duration }

func readMachineCPU() (machineCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}, err
	}
	return parseMachineCPU(string(b))
}

func parseMachineCPU(s string) (machineCPU, error) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return machineCPU{}, fmt.Errorf("proc stat: first line %q is not the cpu total", line)
	}
	var m machineCPU
	for i, v := range f[1:] {
		if i >= 8 { // guest and guest_nice are already in user and nice
			break
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return machineCPU{}, fmt.Errorf("proc stat: cpu field %d: %q", i+1, v)
		}
		d := time.Duration(n) * time.Second / clockTicks
		m.total += d
		if i != 3 && i != 4 { // idle, iowait
			m.busy += d
		}
	}
	return m, nil
}

// threadCPU is the CPU time of the calling OS thread (Linux
// RUSAGE_THREAD), or false where it cannot be read.
func threadCPU() (time.Duration, bool) {
	const rusageThread = 1
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// cpuMeter wraps a handler to add up the CPU its requests use: each
// request runs on one locked OS thread, whose CPU time is read before
// and after. It counts the handler's own work (not net/http's reading of
// the request line and headers, nor goroutines the handler starts): a
// lower bound on what the server costs, close to it for handlers that
// do their work inline, as the fakes do.
type cpuMeter struct {
	next http.Handler
	ns   atomic.Int64
	// onUsed, when set, is told each request's CPU.
	onUsed func(time.Duration)
}

func (c *cpuMeter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	a, ok := threadCPU()
	c.next.ServeHTTP(w, r)
	if b, ok2 := threadCPU(); ok && ok2 && b > a {
		c.ns.Add(int64(b - a))
		if c.onUsed != nil {
			c.onUsed(b - a)
		}
	}
}

// used is the CPU the handler used so far.
func (c *cpuMeter) used() time.Duration { return time.Duration(c.ns.Load()) }
