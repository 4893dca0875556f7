package fakes_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ollama/ollama/api"
	openai "github.com/sashabaranov/go-openai"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

// The fakes are checked with the upstreams' own client libraries, so they stay faithful to the
// real wire formats independently of the backends under test.

func openaiClient(f *fakes.Server) *openai.Client {
	cfg := openai.DefaultConfig("sk-fake")
	cfg.BaseURL = f.BaseURL()
	return openai.NewClientWithConfig(cfg)
}

func chatReq(stream bool) openai.ChatCompletionRequest {
	r := openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}}, Stream: stream}
	if stream {
		r.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	}
	return r
}

func TestOpenAIFakeWithGoOpenAI(t *testing.T) {
	for _, d := range []fakes.Dialect{fakes.OpenAI, fakes.LlamaCpp} {
		t.Run(string(d), func(t *testing.T) {
			f := fakes.New(t, d, fakes.Config{Reply: "Bonjour, \"monde\" <ok>\n", Chunks: 3})
			c := openaiClient(f)
			ctx := context.Background()

			resp, err := c.CreateChatCompletion(ctx, chatReq(false))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Choices[0].Message.Content != "Bonjour, \"monde\" <ok>\n" || resp.Choices[0].FinishReason != "stop" || resp.Usage.TotalTokens != 15 || resp.Model != "m" {
				t.Errorf("whole = %+v", resp)
			}

			st, err := c.CreateChatCompletionStream(ctx, chatReq(true))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = st.Close() }()
			var text strings.Builder
			var usage *openai.Usage
			n := 0
			for {
				ch, err := st.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				n++
				for _, c := range ch.Choices {
					text.WriteString(c.Delta.Content)
				}
				if ch.Usage != nil {
					usage = ch.Usage
				}
			}
			if text.String() != "Bonjour, \"monde\" <ok>\n" || usage == nil || usage.CompletionTokens != 3 || n != 1+3+1+1 {
				t.Errorf("stream: %d chunks, text %q, usage %+v", n, text.String(), usage)
			}
			if f.Requests() != 2 || f.LastRequest().Header.Get("Authorization") != "Bearer sk-fake" {
				t.Errorf("requests %d, last header %v", f.Requests(), f.LastRequest().Header)
			}

			models, err := c.ListModels(ctx)
			if err != nil || len(models.Models) != 1 || models.Models[0].ID != fakes.DefaultModel {
				t.Errorf("models = %+v, %v", models, err)
			}
		})
	}
}

func TestOpenAIFakeErrorWithGoOpenAI(t *testing.T) {
	f := fakes.NewOpenAI(t, fakes.Config{Status: http.StatusTooManyRequests})
	_, err := openaiClient(f).CreateChatCompletion(context.Background(), chatReq(false))
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 429 || apiErr.Message != fakes.DefaultErrorMessage {
		t.Errorf("err = %v", err)
	}
}

func TestOllamaFakeWithAPIClient(t *testing.T) {
	f := fakes.NewOllama(t, fakes.Config{Chunks: 5, ToolCalls: nil})
	u, _ := url.Parse(f.URL)
	c := api.NewClient(u, http.DefaultClient)
	ctx := context.Background()
	for _, stream := range []bool{false, true} {
		var text strings.Builder
		var last api.ChatResponse
		n := 0
		err := c.Chat(ctx, &api.ChatRequest{Model: "m", Messages: []api.Message{{Role: "user", Content: "hi"}}, Stream: &stream}, func(r api.ChatResponse) error {
			n++
			text.WriteString(r.Message.Content)
			last = r
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		wantN := 1
		if stream {
			wantN = 6
		}
		if text.String() != fakes.DefaultReply || n != wantN || !last.Done || last.DoneReason != "stop" ||
			last.EvalCount != 5 || last.PromptEvalCount != 12 || last.TotalDuration != fakes.DefaultTimings.Total {
			t.Errorf("stream=%v: %d responses, text %q, last %+v", stream, n, text.String(), last)
		}
	}
	list, err := c.List(ctx)
	if err != nil || len(list.Models) != 1 || list.Models[0].Name != fakes.DefaultModel {
		t.Errorf("list = %+v, %v", list, err)
	}
	if v, err := c.Version(ctx); err != nil || v != fakes.OllamaVersion {
		t.Errorf("version = %q, %v", v, err)
	}
	if err := c.Heartbeat(ctx); err != nil {
		t.Errorf("heartbeat: %v", err)
	}
}

func TestOllamaFakeToolCalls(t *testing.T) {
	f := fakes.NewOllama(t, fakes.Config{ToolCalls: []cascade.ToolCall{{Function: cascade.ToolCallFunction{Name: "f", Arguments: `{"a":1}`}}}})
	u, _ := url.Parse(f.URL)
	c := api.NewClient(u, http.DefaultClient)
	var calls []api.ToolCall
	err := c.Chat(context.Background(), &api.ChatRequest{Model: "m"}, func(r api.ChatResponse) error {
		calls = append(calls, r.Message.ToolCalls...)
		return nil
	})
	if err != nil || len(calls) != 1 || calls[0].Function.Name != "f" || calls[0].Function.Arguments.String() != `{"a":1}` || calls[0].ID != "call_fake_0" {
		t.Errorf("calls = %+v, %v", calls, err)
	}
}

func TestKnobs(t *testing.T) {
	t.Run("a body cut short records the cancel", func(t *testing.T) {
		for _, f := range []*fakes.Server{fakes.NewOpenAI(t), fakes.NewOllama(t)} {
			path := "/v1/chat/completions"
			if f.Dialect == fakes.Ollama {
				path = "/api/chat"
			}
			u, err := url.Parse(f.BaseURL())
			if err != nil {
				t.Fatal(err)
			}
			conn, err := net.Dial("tcp", u.Host)
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.WriteString(conn, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":")
			_ = conn.Close() // gone before the body's end
			if err != nil || !f.WaitCanceled(30*time.Second) || f.Cancels() != 1 {
				t.Errorf("%v: err %v, cancels %d", f.Dialect, err, f.Cancels())
			}
		}
	})
	t.Run("block records the cancel", func(t *testing.T) {
		f := fakes.NewOpenAI(t, fakes.Config{Block: true})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := openaiClient(f).CreateChatCompletion(ctx, chatReq(false))
		if err == nil || !f.WaitCanceled(30*time.Second) || f.Cancels() != 1 {
			t.Errorf("err %v, cancels %d", err, f.Cancels())
		}
	})
	t.Run("configure applies to the next call", func(t *testing.T) {
		f := fakes.NewOpenAI(t)
		f.Configure(func(c *fakes.Config) { c.Status = http.StatusInternalServerError })
		if _, err := openaiClient(f).CreateChatCompletion(context.Background(), chatReq(false)); err == nil {
			t.Error("no error after Configure")
		}
		f.Configure(func(c *fakes.Config) { c.Status = 0 })
		if _, err := openaiClient(f).CreateChatCompletion(context.Background(), chatReq(false)); err != nil {
			t.Error(err)
		}
	})
	t.Run("truncate cuts the stream", func(t *testing.T) {
		f := fakes.NewOpenAI(t, fakes.Config{TruncateAfter: 1})
		st, err := openaiClient(f).CreateChatCompletionStream(context.Background(), chatReq(true))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = st.Close() }()
		for {
			if _, err = st.Recv(); err != nil {
				break
			}
		}
		if errors.Is(err, io.EOF) {
			t.Error("stream ended cleanly")
		}
	})
	t.Run("health", func(t *testing.T) {
		f := fakes.NewLlamaCpp(t, fakes.Config{HealthStatus: http.StatusServiceUnavailable})
		resp, err := http.Get(f.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("status %d", resp.StatusCode)
		}
	})
}
