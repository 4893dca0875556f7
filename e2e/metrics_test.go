//go:build e2e && linux

package e2e

import (
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"

	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/ledger"
)

// TestTokenMetrics makes a whole call, a streamed call and a streamed cache hit of the whole
// call's question on a proxy of its own, then reads /metrics: the token counts are the usage
// each client got, the stream's time to first token is below its wall time, Ollama's decode
// time per token is there for both neural calls, and the joules per token are the calls'
// figures split as the ledger records them (the settled figure when one settled later).
func TestTokenMetrics(t *testing.T) {
	var ledgerPath string
	p, err := startProxyWith("metrics", func(addr, dir string) string {
		ledgerPath = filepath.Join(dir, "ledger.jsonl")
		return fmt.Sprintf(proxyConfig, addr, env.ollama.url) + fmt.Sprintf("ledger: {path: %q}\n", ledgerPath)
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	t.Cleanup(func() {
		if t.Failed() {
			p.tail(t.Output())
		}
	})

	q := prompt()
	whole, wc := chat(t, p.url, chatBody(q, 12, false)) //nolint:bodyclose // chat closed it
	if whole.StatusCode != http.StatusOK || whole.Header.Get("X-EOC-Stage") != "neural" || wc.Usage == nil {
		t.Fatalf("whole call: status %d, stage %q, usage %v: %+v", whole.StatusCode, whole.Header.Get("X-EOC-Stage"), wc.Usage, wc.Error)
	}
	t0 := time.Now()
	stream := readStream(t, p.url, chatBody(prompt(), 12, true))
	streamWall := time.Since(t0)
	checkStreamEnd(t, stream, "neural")
	sp, sc := stream.usage(t)
	hit := readStream(t, p.url, chatBody(q, 12, true))
	checkStreamEnd(t, hit, "cache")
	hp, hc := hit.usage(t)

	// Metrics take a provisional figure's settled one, after the response: wait for all three.
	var fams map[string]*dto.MetricFamily
	for deadline := time.Now().Add(15 * time.Second); ; {
		fams = scrape(t, p.url)
		if total(fams["eoc_requests_total"], nil) >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := total(fams["eoc_requests_total"], nil); n != 3 {
		t.Fatalf("eoc_requests_total = %v after three calls", n)
	}

	tokens := fams["eoc_tokens_total"]
	for _, c := range []struct {
		labels map[string]string
		want   int
	}{
		{map[string]string{"model": model, "backend": "local", "stage": "neural", "kind": "prompt"}, wc.Usage.PromptTokens + sp},
		{map[string]string{"model": model, "backend": "local", "stage": "neural", "kind": "completion"}, wc.Usage.CompletionTokens + sc},
		{map[string]string{"model": model, "backend": "", "stage": "cache", "kind": "prompt"}, hp},
		{map[string]string{"model": model, "backend": "", "stage": "cache", "kind": "completion"}, hc},
	} {
		if got := total(tokens, c.labels); got != float64(c.want) || c.want <= 0 {
			t.Errorf("eoc_tokens_total%v = %v, want the clients' usage %d; have %s", c.labels, got, c.want, dump(tokens))
		}
	}

	pair := map[string]string{"model": model, "backend": "local"}
	ttft := histograms(fams["eoc_time_to_first_token_seconds"], pair)
	if len(ttft) != 1 || ttft[0].GetSampleCount() != 1 {
		t.Fatalf("eoc_time_to_first_token_seconds%v: %s; want one series with the stream's one sample (a cache hit has none)", pair, dump(fams["eoc_time_to_first_token_seconds"]))
	}
	if s := ttft[0].GetSampleSum(); s <= 0 || s >= streamWall.Seconds() {
		t.Errorf("time to first token %v s, want within the stream's wall time %v", s, streamWall)
	}
	tpot := histograms(fams["eoc_time_per_output_token_seconds"], pair)
	if len(tpot) != 1 || tpot[0].GetSampleCount() != 2 || tpot[0].GetSampleSum() <= 0 {
		t.Errorf("eoc_time_per_output_token_seconds%v: %s; want the two neural calls' samples", pair, dump(fams["eoc_time_per_output_token_seconds"]))
	}

	// The joules per token are the final figures' prompt and completion parts over their tokens.
	final := map[string]energy.Figure{} // request id → its last figure: the settlement's, if any
	if _, err := ledger.Each([]string{ledgerPath}, func(_ string, _ int, r ledger.Record) error {
		if r.Stage == "neural" {
			final[r.RequestID] = r.Figure
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	type key struct{ phase, grade string }
	want := map[key][]float64{}
	for _, id := range []string{whole.Header.Get("X-Request-Id"), stream.resp.Header.Get("X-Request-Id")} {
		f, ok := final[id]
		if !ok {
			t.Fatalf("no ledger record of %s among %v", id, final)
		}
		if f.Provisional { // it did not settle in time: the metrics count no joules per token for it
			continue
		}
		pp, pc := f.PerToken()
		if f.PromptTokens > 0 {
			want[key{"prompt", string(f.Grade)}] = append(want[key{"prompt", string(f.Grade)}], pp)
		}
		if f.CompletionTokens > 0 {
			want[key{"completion", string(f.Grade)}] = append(want[key{"completion", string(f.Grade)}], pc)
		}
	}
	if len(want) == 0 {
		t.Fatal("neither neural figure was final and split between prompt and completion")
	}
	jpt := fams["eoc_joules_per_token"]
	if n := len(histograms(jpt, nil)); n != len(want) {
		t.Errorf("eoc_joules_per_token has %d series, want %d: %s", n, len(want), dump(jpt))
	}
	for k, vs := range want {
		labels := map[string]string{"model": model, "backend": "local", "phase": k.phase, "grade": k.grade}
		h := histograms(jpt, labels)
		var sum float64
		for _, v := range vs {
			sum += v
		}
		if len(h) != 1 || h[0].GetSampleCount() != uint64(len(vs)) || math.Abs(h[0].GetSampleSum()-sum) > 1e-9*math.Max(1, sum) {
			t.Errorf("eoc_joules_per_token%v: %s; want %d samples summing to %v", labels, dump(jpt), len(vs), sum)
		}
	}
	t.Logf("usage whole %d+%d, stream %d+%d, hit %d+%d; TTFT %.4f s of %v; J/token %v", wc.Usage.PromptTokens, wc.Usage.CompletionTokens,
		sp, sc, hp, hc, ttft[0].GetSampleSum(), streamWall.Round(time.Millisecond), want)
}

// scrape reads the proxy's /metrics.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(pmodel.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// matches reports whether m has every label of want with its value ("" matches a label that is
// absent, as the exposition leaves out empty labels).
func matches(m *dto.Metric, want map[string]string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// total sums a counter family's series that match labels.
func total(mf *dto.MetricFamily, labels map[string]string) float64 {
	var n float64
	for _, m := range mf.GetMetric() {
		if matches(m, labels) {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

// histograms returns a histogram family's series that match labels.
func histograms(mf *dto.MetricFamily, labels map[string]string) []*dto.Histogram {
	var out []*dto.Histogram
	for _, m := range mf.GetMetric() {
		if matches(m, labels) {
			out = append(out, m.GetHistogram())
		}
	}
	return out
}

// dump shows a family's series for a failure message.
func dump(mf *dto.MetricFamily) string {
	var lines []string
	for _, m := range mf.GetMetric() {
		var ls []string
		for _, l := range m.GetLabel() {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		v := fmt.Sprint(m.GetCounter().GetValue())
		if h := m.GetHistogram(); h != nil {
			v = fmt.Sprintf("count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
		}
		lines = append(lines, "{"+strings.Join(ls, ",")+"} "+v)
	}
	sort.Strings(lines)
	return "[" + strings.Join(lines, "; ") + "]"
}
