//go:build e2e && linux

package e2e

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ollama/ollama/api"
)

// treeTicks is the CPU time, in clock ticks, of ollama serve and its runners.
func treeTicks(t *testing.T) int64 {
	t.Helper()
	serve := env.ollama.cmd.Process.Pid
	total, err := cpuTicks(serve)
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range children(serve) {
		if n, err := cpuTicks(pid); err == nil {
			total += n
		}
	}
	return total
}

// TestEnergyFromOllamaTree: a neural call's figure comes from Ollama's process tree. Where the
// host has no RAPL (CI, this machine) it is the cpu-time-model estimate, with its reason, and its
// joules agree with the tree's CPU time, read independently from /proc, × the default 10 W per
// core. On a host with RAPL the figure is measured or says why not.
func TestEnergyFromOllamaTree(t *testing.T) {
	if _, err := loadModel(context.Background(), env.ollama); err != nil {
		t.Fatal(err)
	}
	env.ollama.runnerPID(t)
	_, rapl := os.Stat("/sys/class/powercap/intel-rapl:0")
	for i := range 3 {
		before := treeTicks(t)
		resp, c := chat(t, env.proxy.url, chatBody(prompt(), 400, false)) //nolint:bodyclose // chat closed it
		after := treeTicks(t)
		if resp.StatusCode != 200 || resp.Header.Get("X-EOC-Stage") != "neural" {
			t.Fatalf("status %d stage %q", resp.StatusCode, resp.Header.Get("X-EOC-Stage"))
		}
		if c.Usage == nil || c.Usage.CompletionTokens == 0 {
			t.Fatal("no completion tokens")
		}
		joules, err := strconv.ParseFloat(resp.Header.Get("X-EOC-Joules"), 64)
		if err != nil || joules <= 0 {
			t.Fatalf("X-EOC-Joules %q", resp.Header.Get("X-EOC-Joules"))
		}
		grade, method, reason := resp.Header.Get("X-EOC-Energy"), resp.Header.Get("X-EOC-Energy-Method"), resp.Header.Get("X-EOC-Energy-Reason")
		t.Logf("call %d: %d tokens, %s J, %s, %s, %q; tree CPU %d ticks", i, c.Usage.CompletionTokens, resp.Header.Get("X-EOC-Joules"), grade, method, reason, after-before)
		if rapl == nil {
			if grade == "estimated" && reason == "" {
				t.Fatal("an estimate without a reason")
			}
			continue
		}
		if grade != "estimated" || method != "cpu-time-model" || !strings.Contains(reason, "no-rapl") {
			t.Fatalf("without RAPL: grade %q method %q reason %q", grade, method, reason)
		}
		// /proc counts in 10 ms ticks: allow two ticks either side, plus 25% for what runs
		// outside the span (the proxy's span is the upstream call only).
		fromProc := float64(after-before) / 100 * 10
		if joules > fromProc*1.25+0.2 || joules < fromProc*0.75-0.2 {
			t.Fatalf("figure %.3f J, the tree's CPU time says %.3f J", joules, fromProc)
		}
	}
}

// BenchmarkTinyCall is one eoc-tiny call (32 tokens, non-streaming), direct to Ollama and
// through the proxy, each with a question not asked before (a repeated one would reuse Ollama's
// prompt cache, and the proxy's cache and kv would answer it): the yardstick for the kv and
// graph lookup benchmarks that scripts/bench.sh runs beside it, and the proxy's cost on a real
// model call.
func BenchmarkTinyCall(b *testing.B) {
	stream := false
	b.Run("direct", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			err := env.ollama.client().Chat(context.Background(), &api.ChatRequest{Model: model, Stream: &stream,
				Messages: []api.Message{{Role: "user", Content: "how do I rotate the api key " + strconv.Itoa(i) + prompt()}},
				Options:  map[string]any{"num_predict": 32}}, func(api.ChatResponse) error { return nil })
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proxy", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++ // a new question each time: no cache or kv hit
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			resp, err := post(ctx, env.proxy.url, map[string]any{"model": model, "max_tokens": 32,
				"messages": []map[string]any{{"role": "user", "content": "how do I rotate the api key " + strconv.Itoa(i) + prompt()}}})
			if err != nil {
				b.Fatal(err)
			}
			_ = resp.Body.Close()
			cancel()
		}
	})
}
