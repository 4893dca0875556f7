package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// A closer that fails (a ledger whose final fsync fails) is not lost: shutdown runs every closer,
// last opened first, returns their errors joined, and logs them.
func TestShutdownReturnsCloserErrors(t *testing.T) {
	var logBuf strings.Builder
	var order []string
	fsync := errors.New("ledger: fsync: input/output error")
	a := &app{log: zerolog.New(&logBuf), closers: []func() error{
		func() error { order = append(order, "meter"); return nil },
		func() error { order = append(order, "ledger"); return fsync },
	}}
	err := a.shutdown()
	if !errors.Is(err, fsync) {
		t.Fatalf("shutdown = %v, want the ledger's error", err)
	}
	if strings.Join(order, ",") != "ledger,meter" {
		t.Fatalf("closers ran %v", order)
	}
	if !strings.Contains(logBuf.String(), "fsync") {
		t.Fatalf("the error was not logged: %s", logBuf.String())
	}
	if err := a.shutdown(); err != nil || len(order) != 2 {
		t.Fatalf("a second shutdown ran the closers again: %v, %v", err, order)
	}
}
