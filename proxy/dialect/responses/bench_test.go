package responses

import (
	"context"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

// BenchmarkDecodeWhole is a Responses call's own work at the edge: decode an 80-character
// question, render the whole answer and store it in memory.
func BenchmarkDecodeWhole(b *testing.B) {
	d := New(Options{})
	body := []byte(`{"model":"eoc-tiny","input":"What is the capital of France, and what river runs through it? Answer briefly.","max_output_tokens":64}`)
	ans := answer("Paris; the Seine runs through it.", "stop")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		x, e := d.Decode(ctx, "t", body)
		if e != nil {
			b.Fatal(e)
		}
		if _, err := x.Whole(ans); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStream is the same call streamed: eight text chunks, the usage chunk and the end.
func BenchmarkStream(b *testing.B) {
	d := New(Options{})
	body := []byte(`{"model":"eoc-tiny","input":"What is the capital of France, and what river runs through it? Answer briefly.","stream":true}`)
	word := "word "
	chunk := &cascade.Chunk{Model: "m", Choices: []cascade.ChunkChoice{{Delta: cascade.Delta{Content: &word}}}}
	ans := answer("word word word word word word word word ", "stop")
	emit := func(dialect.Event) error { return nil }
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		x, e := d.Decode(ctx, "t", body)
		if e != nil {
			b.Fatal(e)
		}
		enc := x.Encoder()
		for range 8 {
			if err := enc.Chunk(chunk, emit); err != nil {
				b.Fatal(err)
			}
		}
		if err := enc.End(ans, dialect.Figures{}, emit); err != nil {
			b.Fatal(err)
		}
	}
}
