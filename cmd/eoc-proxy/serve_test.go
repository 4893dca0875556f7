package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

// TestGracefulShutdown sends SIGTERM while a slow call is in flight: the call completes, new
// connections are refused, and serve returns cleanly.
func TestGracefulShutdown(t *testing.T) {
	fake := fakes.NewOpenAI(t, fakes.Config{Delay: 700 * time.Millisecond})
	addr := freeAddr(t)
	cfgPath := t.TempDir() + "/eoc.yaml"
	writeFile(t, cfgPath, fmt.Sprintf(`
listen: %s
log_level: error
limits: {shutdown_timeout: 5s}
cascade: {stages: [neural]}
backends: [{name: up, type: openai, url: %q}]
`, addr, fake.BaseURL()))
	served := make(chan error, 1)
	go func() { served <- runServe([]string{"-config", cfgPath}, io.Discard) }()
	waitUp(t, "http://"+addr+"/healthz")

	var wg sync.WaitGroup
	var status int
	var callErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"slow"}]}`))
		if err != nil {
			callErr = err
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		status = resp.StatusCode
	}()
	// SIGTERM once the call is at the fake (its Delay holds it there): sent earlier, on a loaded
	// machine, the call might not have been accepted yet and would be refused.
	for deadline := time.Now().Add(30 * time.Second); fake.Requests() == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if fake.Requests() == 0 {
		t.Fatal("the call never reached the fake")
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if callErr != nil || status != 200 {
		t.Fatalf("in-flight call: status %d err %v", status, callErr)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve returned %v", err)
		}
	case <-time.After(30 * time.Second): // bounds a hang only; generous for a loaded machine
		t.Fatal("serve did not return after SIGTERM")
	}
	if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
		_ = resp.Body.Close()
		t.Fatal("still accepting after shutdown")
	}
}

// TestLogsHoldNoPromptOrKey serves a call with a recognisable prompt, completion and keys, and
// checks the access log carries the key id and figures but none of them.
func TestLogsHoldNoPromptOrKey(t *testing.T) {
	fake := fakes.NewOpenAI(t, fakes.Config{Reply: "COMPLETION-TEXT-77"})
	cfgPath := t.TempDir() + "/eoc.yaml"
	writeFile(t, cfgPath, fmt.Sprintf(`
log_level: debug
cascade: {stages: [cache, neural]}
backends: [{name: up, type: openai, url: %q, api_key: UPSTREAM-KEY-55}]
auth: {keys: [{id: team-a, key: PROXY-KEY-66}]}
`, fake.BaseURL()))
	cfg, err := loadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	a, err := build(cfg, filesFor(cfgPath), newLogger(cfg.LogLevel, &logs))
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	srv := &http.Server{Handler: a.handler}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	for _, body := range []string{`{"model":"m","messages":[{"role":"user","content":"PROMPT-TEXT-88"}]}`, `{"model":`} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer PROXY-KEY-66")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	if !strings.Contains(string(fake.LastRequest().Header.Get("Authorization")), "UPSTREAM-KEY-55") {
		t.Fatal("the upstream key was not sent upstream")
	}
	out := logs.String()
	for _, secret := range []string{"PROMPT-TEXT-88", "COMPLETION-TEXT-77", "UPSTREAM-KEY-55", "PROXY-KEY-66"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log holds %s:\n%s", secret, out)
		}
	}
	for _, want := range []string{`"key_id":"team-a"`, `"stage":"neural"`, `"joules":`, `"overhead_ms":`, `"status":400`} {
		if !strings.Contains(out, want) {
			t.Errorf("the access log lacks %s:\n%s", want, out)
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitUp(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if resp, err := http.Get(url); err == nil {
			_ = resp.Body.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never came up", url)
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
