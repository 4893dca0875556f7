package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

// The browser's cascade on this platform: a shipped kv seed and a shipped fact answered with an
// estimate whose bounds make room for the clock's tick, the repeat from the cache, a miss with
// the API's words, and each receipt the hash of what the result says.
func TestResolve(t *testing.T) {
	const tick = 100 * time.Microsecond // Chromium's coarsened performance.now()
	b, err := newBrowserCascade(tick)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ q, stage, payload string }{
		{"What is eoc-proxy?", "kv", "OpenAI-compatible inference proxy"},
		{"Who wrote Hamlet?", "graph", "William Shakespeare"},
		{"Who wrote Hamlet?", "cache", "William Shakespeare"},
	} {
		r := b.resolve(c.q)
		if r.Stage != c.stage || !strings.Contains(r.Payload, c.payload) || r.Error != "" {
			t.Fatalf("%q: %+v", c.q, r)
		}
		if r.Grade != string(energy.Estimated) || r.Method != energy.MethodStageModel || r.Coverage != energy.CoverageWhole ||
			!strings.HasSuffix(r.Reason, ";browser-clock-100µs") {
			t.Errorf("%q: figure %+v", c.q, r)
		}
		// Even a wall time read as zero leaves one tick at the stated watts under the high bound.
		if floor := tick.Seconds() * b.watts * energy.CPUModelHigh; !(0 <= r.JoulesLow && r.JoulesLow <= r.Joules && r.Joules+floor <= r.JoulesHigh+1e-9) {
			t.Errorf("%q: bounds %v ≤ %v ≤ %v, want room for a tick (%v J)", c.q, r.JoulesLow, r.Joules, r.JoulesHigh, floor)
		}
		if math.Abs(r.Microjoules-r.Joules*1e6) > 1e-6 {
			t.Errorf("%q: %v µJ for %v J", c.q, r.Microjoules, r.Joules)
		}
		if r.JoulesSaved <= 0 || r.JoulesSavedGrade != "estimated" {
			t.Errorf("%q: saved %v %q", c.q, r.JoulesSaved, r.JoulesSavedGrade)
		}
		body, _ := json.Marshal(map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": c.q}}})
		tm, err := time.Parse(time.RFC3339Nano, r.ReceiptTime)
		if err != nil {
			t.Fatal(err)
		}
		req := cascade.Request{Raw: body}
		if want := (energy.Receipt{Key: req.Key(), Stage: r.Stage, Model: r.Model, Joules: r.Joules, Grade: energy.Grade(r.Grade), Time: tm}).Hash(); r.Receipt != want {
			t.Errorf("%q: receipt %s, the result's fields hash to %s", c.q, r.Receipt, want)
		}
	}
	r := b.resolve("Write me a poem about the sea.")
	if r.Stage != "" || r.Payload != "" || !strings.Contains(r.Error, "no cascade stage could answer, and the neural stage is off") ||
		!strings.Contains(r.Error, "browser") {
		t.Errorf("a miss: %+v", r)
	}
}

func TestClockTick(t *testing.T) {
	if d := clockTick(time.Second); d <= 0 || d > time.Second {
		t.Errorf("clockTick(1s) = %v", d)
	}
	if d := clockTick(0); d != 0 {
		t.Errorf("clockTick(0) = %v, want the limit", d)
	}
}
