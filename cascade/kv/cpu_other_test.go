//go:build !unix

package kv

import "testing"

// cpuClock reports nothing where the process's CPU time is not read (see cpu_unix_test.go).
func cpuClock(*testing.B) func() { return func() {} }
