//go:build integration && linux

package backends

// Runs the Ollama backend against a real Ollama (bin/ollama, built by scripts/build-ollama.sh)
// serving the tiny test model:
//
//	go test -race -tags integration -run Integration -count=1 ./backends/

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/tinymodel"
)

// startOllama starts bin/ollama on a free loopback port with its own models directory and
// returns its root URL, with the tiny chat model created.
func startOllama(t *testing.T) string {
	t.Helper()
	bin, _ := filepath.Abs("../bin/ollama")
	if _, err := os.Stat(bin); err != nil {
		t.Skip("no bin/ollama; run scripts/build-ollama.sh")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(), "OLLAMA_HOST="+addr, "OLLAMA_MODELS="+filepath.Join(dir, "models"), "HOME="+dir, "OLLAMA_NOPRUNE=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logf, _ := os.Create(filepath.Join(dir, "ollama.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) // ollama and its runners, all ours
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("ollama log:\n%s", b)
		}
	})
	root := "http://" + addr
	u, _ := url.Parse(root)
	c := api.NewClient(u, http.DefaultClient)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		if _, err := c.Version(ctx); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("ollama did not start")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := tinymodel.Create(ctx, c, tinymodel.Chat); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestIntegrationOllama(t *testing.T) {
	root := startOllama(t)
	b, err := New(Options{Name: "real", Type: "ollama", URL: root, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := b.(cascade.Pinger).Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	models, err := b.(cascade.ModelLister).Models(ctx)
	if err != nil || len(models) == 0 || !strings.HasPrefix(models[0], tinymodel.ChatName) {
		t.Fatalf("Models = %v, %v", models, err)
	}

	body := `{"model":"` + tinymodel.ChatName + `","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello there"}],
		"max_tokens":8,"temperature":0,"seed":7,"x_unknown":true}`
	cases := []struct {
		name   string
		body   string
		stream bool
		finish string
	}{
		{name: "whole", body: body, finish: "length"},
		{name: "stream", body: body, stream: true, finish: "length"},
		{name: "stop word", stream: true, finish: "stop",
			body: `{"model":"` + tinymodel.ChatName + `","messages":[{"role":"user","content":"hi"}],"max_tokens":64,"stop":[" "]}`},
		{name: "json format", finish: "length",
			body: `{"model":"` + tinymodel.ChatName + `","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"response_format":{"type":"json_object"}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c collector
			var sink cascade.Sink
			if tc.stream {
				sink = c.sink
			}
			ans, err := b.Chat(ctx, chatRequest(t, tc.body), sink)
			if err != nil {
				t.Fatalf("Chat: %v", err)
			}
			if !ans.Complete || ans.Choices[0].FinishReason != tc.finish || ans.Text() == "" && tc.finish == "length" {
				t.Errorf("answer %s", mustJSON(t, ans))
			}
			if ans.Usage.CompletionTokens == 0 || ans.Usage.PromptTokens == 0 {
				t.Errorf("usage %+v", ans.Usage)
			}
			tm := ans.Timings
			if tm == nil || tm.PredictedN != ans.Usage.CompletionTokens || tm.Total <= 0 || tm.Eval <= 0 {
				t.Errorf("timings %+v", tm)
			}
			if tc.stream {
				if c.text() != ans.Text() || len(c.chunks[len(c.chunks)-1].Choices) != 0 {
					t.Errorf("streamed %q, answer %q", c.text(), ans.Text())
				}
			}
			t.Logf("%s: %q usage %+v timings %+v", tc.name, ans.Text(), *ans.Usage, *tm)
		})
	}

	t.Run("tools refused by the model's template", func(t *testing.T) {
		_, err := b.Chat(ctx, chatRequest(t, `{"model":"`+tinymodel.ChatName+`","messages":[{"role":"user","content":"hi"}],
			"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string"}}}}}]}`), nil)
		var up *cascade.UpstreamError
		if !errors.As(err, &up) || up.Status != http.StatusBadRequest || !strings.Contains(up.Message, "does not support tools") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("unknown model", func(t *testing.T) {
		_, err := b.Chat(ctx, chatRequest(t, `{"model":"no-such-model","messages":[{"role":"user","content":"hi"}]}`), nil)
		var up *cascade.UpstreamError
		if !errors.As(err, &up) || up.Status != http.StatusNotFound || !strings.Contains(up.Message, "not found") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("client cancel mid-stream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		n := 0
		_, err := b.Chat(ctx, chatRequest(t, `{"model":"`+tinymodel.ChatName+`","messages":[{"role":"user","content":"hi"}],"max_tokens":2000}`),
			func(*cascade.Chunk) error {
				if n++; n == 3 {
					cancel()
				}
				return nil
			})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v", err)
		}
	})
}
