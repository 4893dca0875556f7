package backends

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/coldbench"
)

// BenchmarkOllamaPhasesCold times the parts of a whole Ollama call that are the backend's own
// work, each with the CPU caches evicted before it: encode (toOllama and the JSON), bound (a
// call's bounds set and stopped) and answer (a whole reply read, decoded and converted).
// phase-ns is the median.
func BenchmarkOllamaPhasesCold(b *testing.B) {
	o, err := NewOllama(Options{Name: "o", URL: "http://127.0.0.1:1", Timeout: 10 * time.Second, MaxDuration: 30 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	req := chatRequest(b, benchBody)
	ctx := context.Background()
	phases := []struct {
		name string
		run  func()
	}{
		{"encode", func() {
			oreq, _ := toOllama(req)
			st := false
			oreq.Stream = &st
			if _, err := json.Marshal(oreq); err != nil {
				b.Fatal(err)
			}
		}},
		{"bound", func() { phaseBound(o, ctx) }},
		{"answer", func() {
			resp := &http.Response{Body: io.NopCloser(bytes.NewReader([]byte(benchOllamaAnswer))), ContentLength: int64(len(benchOllamaAnswer))}
			conv := &ollamaConv{backend: o.name, id: "chatcmpl-x", model: "m", asm: cascade.Assembler{}}
			if ans, err := phaseWhole(o, ctx, resp, conv); err != nil || !ans.Complete {
				b.Fatal(err)
			}
		}},
	}
	for _, p := range phases {
		b.Run(p.name, func(b *testing.B) {
			cold := coldbench.New()
			b.ReportAllocs()
			for b.Loop() {
				cold.Time(b, p.run)
			}
			cold.Report(b, "phase-ns")
		})
	}
}

func phaseBound(o *Ollama, ctx context.Context) {
	_, c := o.attempt(ctx)
	c.stop()
}

func phaseWhole(o *Ollama, ctx context.Context, resp *http.Response, conv *ollamaConv) (*cascade.Answer, error) {
	return o.whole(ctx, resp, conv)
}
