package cascade

import (
	"encoding/hex"
	"strings"
	"testing"
)

// NewID is "chatcmpl-" and 24 hex digits, fresh each call, in one allocation.
func TestNewID(t *testing.T) {
	a, b := NewID(), NewID()
	for _, id := range []string{a, b} {
		rest, ok := strings.CutPrefix(id, "chatcmpl-")
		if _, err := hex.DecodeString(rest); !ok || len(rest) != 24 || err != nil {
			t.Errorf("NewID() = %q, want chatcmpl- and 24 hex digits", id)
		}
	}
	if a == b {
		t.Errorf("two NewIDs are both %q", a)
	}
	if raceEnabled {
		return // the race detector's instrumentation allocates on its own
	}
	if n := testing.AllocsPerRun(100, func() { _ = NewID() }); n != 1 {
		t.Errorf("NewID allocates %v objects, want 1", n)
	}
}
