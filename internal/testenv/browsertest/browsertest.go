// Package browsertest finds the headless browser the end-to-end tests drive (e2e's /ui page,
// e2e/wasm's browser build).
package browsertest

import (
	"os"
	"os/exec"
	"testing"
)

// Chromium returns the browser's path: $EOC_CHROMIUM, else Debian's chromium on PATH. Without
// one the test is skipped, or fails where the suite must run (EOC_E2E=1, CI).
func Chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("EOC_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("EOC_E2E") == "1" || os.Getenv("CI") == "true" {
		t.Fatal("no chromium on PATH (Debian: apt-get install chromium; .ci/run installs it)")
	}
	t.Skip("no chromium on PATH")
	return ""
}
