//go:build e2e && linux

// Package wasm_test loads the browser build of the cascade (cmd/eoc-wasm, docs/try) in headless
// Chromium. It needs no Ollama, so it is a package of its own, apart from e2e's TestMain.
//
//	go test -tags e2e -count=1 -v ./e2e/wasm/
package wasm_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/eoc-proxy/eoc-proxy/internal/testenv/browsertest"
)

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// site builds the page's directory as the README says: eoc.wasm (GOOS=js GOARCH=wasm), the
// toolchain's wasm_exec.js, and docs/try/index.html. It returns the directory and the wasm's size.
func site(t *testing.T) (string, int64) {
	t.Helper()
	root := filepath.Dir(goEnv(t, "GOMOD"))
	dir := t.TempDir()
	wasm := filepath.Join(dir, "eoc.wasm")
	build := exec.Command("go", "build", "-o", wasm, "./cmd/eoc-wasm")
	build.Dir = root
	build.Env = append(os.Environ(), "GOOS=js", "GOARCH=wasm")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("GOOS=js GOARCH=wasm go build ./cmd/eoc-wasm: %v\n%s", err, out)
	}
	copyFile(t, filepath.Join(goEnv(t, "GOROOT"), "lib", "wasm", "wasm_exec.js"), filepath.Join(dir, "wasm_exec.js"))
	copyFile(t, filepath.Join(root, "docs", "try", "index.html"), filepath.Join(dir, "index.html"))
	fi, err := os.Stat(wasm)
	if err != nil {
		t.Fatal(err)
	}
	return dir, fi.Size()
}

// result is what WasmCascade.resolve returns.
type result struct {
	Stage            string  `json:"stage"`
	Payload          string  `json:"payload"`
	Model            string  `json:"model"`
	Joules           float64 `json:"joules"`
	Microjoules      float64 `json:"microjoules"`
	JoulesLow        float64 `json:"joules_low"`
	JoulesHigh       float64 `json:"joules_high"`
	Grade            string  `json:"grade"`
	Coverage         string  `json:"coverage"`
	Method           string  `json:"method"`
	Reason           string  `json:"reason"`
	JoulesSaved      float64 `json:"joules_saved"`
	JoulesSavedGrade string  `json:"joules_saved_grade"`
	Receipt          string  `json:"receipt"`
	ReceiptTime      string  `json:"receipt_time"`
	Error            string  `json:"error"`
}

var (
	hex64      = regexp.MustCompile(`^[0-9a-f]{64}$`)
	clockTick  = regexp.MustCompile(`;browser-clock-([0-9.]+[µnm]?s)$`)
	boundsText = regexp.MustCompile(`^(\S+) ≤ J ≤ (\S+)$`)
)

// TestWasmInChromium is issue 31's second done-when: headless Chromium loads docs/try with the
// wasm build, and the page, asked through its form, answers a shipped kv seed and a shipped fact
// with their stages and estimated figures; WasmCascade.resolve, called as a page script would,
// returns the same shape, with a receipt; a question no cheap stage answers says the neural
// stage is absent.
func TestWasmInChromium(t *testing.T) {
	browser := browsertest.Chromium(t)
	dir, size := site(t)
	t.Logf("eoc.wasm: %d bytes (%.1f MiB)", size, float64(size)/(1<<20))
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer srv.Close()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(actx)
	defer cancelTab()
	ctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()

	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/index.html"), chromedp.WaitVisible(`body[data-ready]`)); err != nil {
		status, _ := chromedp.Run(ctx, chromedp.Text(`#status`))
		t.Fatalf("chromium: loading the page: %v (status %q)", err, status)
	}

	for _, c := range []struct{ q, stage, payload string }{
		{"What is eoc-proxy?", "kv", "OpenAI-compatible inference proxy"},
		{"Who wrote Hamlet?", "graph", "Hamlet was written by William Shakespeare."},
	} {
		err := chromedp.Do(ctx,
			chromedp.SetValue(`#question`, c.q),
			chromedp.Click(`#go`),
			chromedp.WaitVisible(fmt.Sprintf(`#result[data-stage=%q]`, c.stage)),
		)
		if err != nil {
			t.Fatalf("%q: %v", c.q, err)
		}
		shown, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`Object.fromEntries(
			["stage", "payload", "joules", "bounds", "method", "saved", "receipt"].map(id => [id, document.getElementById(id).textContent]))`))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%q: the page shows %v", c.q, shown)
		if shown["stage"] != c.stage || !strings.Contains(shown["payload"], c.payload) || !hex64.MatchString(shown["receipt"]) ||
			!strings.HasSuffix(shown["joules"], "µJ estimated, coverage whole") || !strings.HasSuffix(shown["saved"], "J estimated") ||
			!strings.HasPrefix(shown["method"], "stage-model (in-process-stage;") {
			t.Errorf("%q: the page shows %v", c.q, shown)
		}
		m := boundsText.FindStringSubmatch(shown["bounds"])
		if m == nil {
			t.Fatalf("%q: bounds %q", c.q, shown["bounds"])
		}
		lo, _ := strconv.ParseFloat(m[1], 64)
		hi, _ := strconv.ParseFloat(m[2], 64)
		uj, err := strconv.ParseFloat(strings.Fields(shown["joules"])[0], 64)
		if err != nil {
			t.Fatal(err)
		}
		if j := uj / 1e6; !(lo == 0 && j <= hi*(1+1e-9) && hi > 0) {
			t.Errorf("%q: %v ≤ %v ≤ %v", c.q, lo, j, hi)
		}
	}

	// The JavaScript API, as a page calls it.
	resolve := func(q string) result {
		t.Helper()
		r, err := chromedp.Run(ctx, chromedp.Evaluate[result](fmt.Sprintf(`new WasmCascade().resolve(%q)`, q), chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("resolve(%q): %v", q, err)
		}
		return r
	}
	for _, c := range []struct{ q, stage string }{
		{"How do I skip the cache?", "kv"},
		{"What is the capital of France?", "graph"},
		{"What is the capital of France?", "cache"},
	} {
		r := resolve(c.q)
		t.Logf("resolve(%q) = %+v", c.q, r)
		if r.Stage != c.stage || r.Payload == "" || r.Error != "" || r.Grade != "estimated" || r.Method != "stage-model" ||
			!hex64.MatchString(r.Receipt) || r.JoulesSaved <= 0 {
			t.Errorf("resolve(%q): %+v, want stage %s", c.q, r, c.stage)
		}
		// The high bound holds the wall time read plus one tick of the browser's clock, which the
		// reason names.
		m := clockTick.FindStringSubmatch(r.Reason)
		if m == nil {
			t.Errorf("resolve(%q): reason %q names no clock tick", c.q, r.Reason)
			continue
		}
		tick, err := time.ParseDuration(m[1])
		if err != nil {
			t.Fatal(err)
		}
		if floor := tick.Seconds() * 10 * 1.5; !(r.JoulesLow == 0 && r.Joules >= 0 && r.Joules <= r.JoulesHigh && r.JoulesHigh >= floor*(1-1e-9)) {
			t.Errorf("resolve(%q): %v ≤ %v ≤ %v, the tick %v alone is %v J", c.q, r.JoulesLow, r.Joules, r.JoulesHigh, tick, floor)
		}
		if _, err := time.Parse(time.RFC3339Nano, r.ReceiptTime); err != nil {
			t.Errorf("receipt time %q: %v", r.ReceiptTime, err)
		}
	}
	if r := resolve("Write me a poem about the sea."); r.Stage != "" || !strings.Contains(r.Error, "no cascade stage could answer, and the neural stage is off") {
		t.Errorf("a miss: %+v", r)
	}
}
