//go:build e2e && linux

package e2e

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/eoc-proxy/eoc-proxy/internal/testenv/browsertest"
)

// TestUIPage: after a neural call, a cache hit and a graph hit on a proxy of its own, headless
// Chromium loads /ui, and each stage's joules as the page shows them equal /metrics's
// eoc_joules_total summed by stage, to the rounding the page shows. It saves a screenshot
// ($EOC_UI_SCREENSHOT, relative to the repository, else in the suite's temp dir).
func TestUIPage(t *testing.T) {
	browser := browsertest.Chromium(t)
	facts := filepath.Join(env.tmp, "ui-facts.tsv")
	if err := os.WriteFile(facts, []byte("Night Ferry\tdirector\tTomas Vell\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := startProxyWith("ui", func(addr, _ string) string {
		return fmt.Sprintf(`listen: %s
log_level: info
cascade:
  stages: [cache, kv, graph, neural]
  graph: {files: [%q]}
backends:
  - {name: local, type: ollama, url: %s, models: ["*"], timeout: 120s}
`, addr, facts, env.ollama.url)
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()

	q := prompt()
	for i, want := range []string{"neural", "cache"} {
		r, c := chat(t, p.url, chatBody(q, 12, false)) //nolint:bodyclose // chat closed it
		if r.StatusCode != http.StatusOK || r.Header.Get("X-EOC-Stage") != want {
			t.Fatalf("call %d: status %d, stage %q, want %s: %+v", i, r.StatusCode, r.Header.Get("X-EOC-Stage"), want, c.Error)
		}
	}
	r, c := chat(t, p.url, chatBody("Who directed Night Ferry?", 12, false)) //nolint:bodyclose // chat closed it
	if r.StatusCode != http.StatusOK || r.Header.Get("X-EOC-Stage") != "graph" {
		t.Fatalf("graph call: status %d, stage %q: %+v", r.StatusCode, r.Header.Get("X-EOC-Stage"), c)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1400, 1900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(actx)
	defer cancelTab()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()

	err = chromedp.Do(ctx,
		chromedp.Navigate(p.url+"/ui"),
		chromedp.WaitVisible(`body[data-updated]`),
		chromedp.WaitVisible(`#stages tr[data-stage="graph"]`),
	)
	if err != nil {
		t.Fatalf("chromium: loading /ui: %v", err)
	}
	shown, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll("#stages tr[data-stage]")].map(
		tr => [tr.dataset.stage, tr.querySelector("td.joules").textContent]))`))
	if err != nil {
		t.Fatalf("chromium: reading the stages: %v", err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("chromium: screenshot: %v", err)
	}
	want := metricJoules(t, p.url)
	for _, stage := range []string{"neural", "cache", "graph"} {
		text, ok := shown[stage]
		if !ok {
			t.Errorf("the page shows no %s row: %v", stage, shown)
			continue
		}
		got, err := strconv.ParseFloat(text, 64)
		if err != nil {
			t.Errorf("%s: %q is not a number", stage, text)
			continue
		}
		decimals := 0
		if i := strings.IndexByte(text, '.'); i >= 0 {
			decimals = len(text) - i - 1
		}
		if tol := 0.5*math.Pow10(-decimals) + 1e-12; math.Abs(got-want[stage]) > tol || want[stage] <= 0 {
			t.Errorf("%s: the page shows %s J, /metrics has %v J", stage, text, want[stage])
		}
	}
	out := os.Getenv("EOC_UI_SCREENSHOT")
	switch {
	case out == "":
		out = filepath.Join(env.tmp, "ui.png")
	case !filepath.IsAbs(out):
		out = filepath.Join(env.root, out)
	}
	if len(png) < 1000 || string(png[1:4]) != "PNG" {
		t.Fatalf("the screenshot is not a PNG (%d bytes)", len(png))
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("page: %v; /metrics: %v; screenshot %s", shown, want, out)
}

var joulesLine = regexp.MustCompile(`^eoc_joules_total\{(.*)\} (\S+)$`)
var stageLabel = regexp.MustCompile(`(?:^|,)stage="([^"]*)"`)

// metricJoules sums eoc_joules_total by stage from the proxy's /metrics.
func metricJoules(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		m := joulesLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := stageLabel.FindStringSubmatch(m[1])
		v, err := strconv.ParseFloat(m[2], 64)
		if s == nil || err != nil {
			t.Fatalf("unreadable metric line %q", line)
		}
		sums[s[1]] += v
	}
	return sums
}
