package backends

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/ollama/ollama/api"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

const benchBody = `{"model":"fake-model","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello in five words."}],"temperature":0.2,"max_tokens":32,"x_unknown":{"keep":true}}`

func benchChat(b *testing.B, typ string, f *fakes.Server) {
	be := newBackend(b, typ, f)
	for _, stream := range []bool{false, true} {
		name := "whole"
		if stream {
			name = "stream"
		}
		b.Run(name, func(b *testing.B) {
			req := chatRequest(b, benchBody)
			var sink cascade.Sink
			if stream {
				sink = func(*cascade.Chunk) error { return nil }
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				ans, err := be.Chat(ctx, req, sink)
				if err != nil || !ans.Complete {
					b.Fatalf("Chat: %v", err)
				}
			}
		})
	}
}

// BenchmarkOpenAIChat is one call through the OpenAI backend to the fake, whole and streamed.
func BenchmarkOpenAIChat(b *testing.B) { benchChat(b, "openai", fakes.NewOpenAI(b)) }

// BenchmarkLlamaCppChat is BenchmarkOpenAIChat plus llama.cpp's timings.
func BenchmarkLlamaCppChat(b *testing.B) { benchChat(b, "llamacpp", fakes.NewLlamaCpp(b)) }

// BenchmarkOllamaChat is one call through the Ollama backend to the fake, whole and streamed,
// beside the same streamed call through ollama's own api.Client for comparison.
func BenchmarkOllamaChat(b *testing.B) {
	f := fakes.NewOllama(b)
	benchChat(b, "ollama", f)
	b.Run("api.Client/stream", func(b *testing.B) {
		u, _ := url.Parse(f.URL)
		c := api.NewClient(u, &http.Client{Transport: newTransport()})
		areq, err := toOllama(chatRequest(b, benchBody))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if err := c.Chat(context.Background(), &areq.ChatRequest, func(api.ChatResponse) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkBareHop is the floor: the same body POSTed to the OpenAI fake and read back with
// net/http alone, no decoding.
func BenchmarkBareHop(b *testing.B) {
	f := fakes.NewOpenAI(b)
	client := &http.Client{Transport: newTransport()}
	for _, stream := range []bool{false, true} {
		name := "whole"
		body := []byte(benchBody)
		if stream {
			name = "stream"
			body, _ = setStream(body, true)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.Post(f.BaseURL()+"/chat/completions", "application/json", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
}

// benchOllamaAnswer is a whole /api/chat answer as the fake (and Ollama) sends it.
const benchOllamaAnswer = `{"model":"bench-model","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"Hello from the fake upstream."},"done":true,"done_reason":"stop","total_duration":7000000,"load_duration":1000000,"prompt_eval_count":12,"prompt_eval_duration":2000000,"eval_count":4,"eval_duration":3000000}`

// BenchmarkOllamaDecode is the decoding of one answer line: into ollamaLine as Chat does, into
// ollamaLine by encoding/json, and into api.ChatResponse, what ollamaLine replaced, for comparison.
func BenchmarkOllamaDecode(b *testing.B) {
	data := []byte(benchOllamaAnswer)
	b.Run("ollamaLine", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var line ollamaLine
			if err := decodeAnswer(data, &line); err != nil || !line.Done {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var line ollamaLine
			if err := json.Unmarshal(data, &line); err != nil || !line.Done {
				b.Fatal(err)
			}
		}
	})
	b.Run("api.ChatResponse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var line struct {
				api.ChatResponse
				Error string `json:"error"`
			}
			if err := json.Unmarshal(data, &line); err != nil || !line.Done {
				b.Fatal(err)
			}
		}
	})
}
