//go:build unix

package kv

import (
	"syscall"
	"testing"
	"time"
)

// cpuClock starts counting the process's CPU time (user and system, every thread); the function
// it returns reports it per op as cpu-ns/op. On a machine shared with other work it is steadier
// than the wall time, and it counts what a parallel search costs on every core.
func cpuClock(b *testing.B) func() {
	start := processCPU()
	return func() { b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op") }
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
