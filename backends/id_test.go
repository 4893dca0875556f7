package backends

import (
	"strings"
	"testing"
)

// newID is the prefix and 24 characters of rand.Text's alphabet, fresh each call.
func TestNewID(t *testing.T) {
	a, b := newID("chatcmpl-"), newID("chatcmpl-")
	for _, id := range []string{a, b} {
		rest, ok := strings.CutPrefix(id, "chatcmpl-")
		if !ok || len(rest) != 24 || strings.Trim(rest, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") != "" {
			t.Errorf("newID = %q, want chatcmpl- and 24 characters of A-Z2-7", id)
		}
	}
	if a == b {
		t.Errorf("two ids are both %q", a)
	}
	if raceEnabled {
		return // the race detector's instrumentation allocates on its own
	}
	if n := testing.AllocsPerRun(100, func() { _ = newID("call_") }); n != 1 {
		t.Errorf("newID allocates %v objects, want 1", n)
	}
}
