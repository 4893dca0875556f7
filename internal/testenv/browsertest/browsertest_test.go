package browsertest

import "testing"

// TestChromiumFromEnv: $EOC_CHROMIUM names the browser, whatever is on PATH.
func TestChromiumFromEnv(t *testing.T) {
	t.Setenv("EOC_CHROMIUM", "/opt/chromium/chrome")
	if got := Chromium(t); got != "/opt/chromium/chrome" {
		t.Fatalf("Chromium = %q", got)
	}
}
