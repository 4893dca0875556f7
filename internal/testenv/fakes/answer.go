package fakes

import (
	"context"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// AnswerBackend is a cascade backend in process that answers every chat call at once, as a local
// model would: the text, usage and the model's own timings. Benchmarks use it to measure the
// work around a backend.
type AnswerBackend struct{}

// Chat answers req.
func (AnswerBackend) Chat(_ context.Context, req *cascade.Request, _ cascade.Sink) (*cascade.Answer, error) {
	t := "The capital of France is Paris."
	return &cascade.Answer{ID: "chatcmpl-1", Model: req.Chat.Model, Created: 1764900000, Complete: true,
		Choices: []cascade.Choice{{Message: cascade.AnswerMessage{Role: "assistant", Content: &t}, FinishReason: "stop"}},
		Usage:   &cascade.Usage{PromptTokens: 20, CompletionTokens: 8, TotalTokens: 28},
		Timings: &cascade.Timings{PromptN: 20, PredictedN: 8, Eval: 8 * time.Millisecond, Total: 10 * time.Millisecond}}, nil
}
