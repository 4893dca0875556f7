package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

// TestPprofOffByDefault: a config that does not name debug.pprof serves no profiles, and the
// public handler never carries pprof's routes.
func TestPprofOffByDefault(t *testing.T) {
	fake := fakes.NewOpenAI(t, fakes.Config{})
	cfgPath := t.TempDir() + "/eoc.yaml"
	writeFile(t, cfgPath, fmt.Sprintf("cascade: {stages: [neural]}\nbackends: [{name: up, type: openai, url: %q}]\n", fake.BaseURL()))
	cfg, err := loadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Debug.Pprof != "" {
		t.Fatalf("debug.pprof defaults to %q, want off", cfg.Debug.Pprof)
	}
	a, err := build(cfg, filesFor(cfgPath), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1"} {
		rec := httptest.NewRecorder()
		a.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code == http.StatusOK {
			t.Errorf("the public handler serves %s", path)
		}
	}
}

// TestPprofOnItsOwnListener: with debug.pprof set, profiles are served on that address only,
// and the listener closes with serve.
func TestPprofOnItsOwnListener(t *testing.T) {
	fake := fakes.NewOpenAI(t, fakes.Config{})
	addr, debug := freeAddr(t), freeAddr(t)
	cfgPath := t.TempDir() + "/eoc.yaml"
	writeFile(t, cfgPath, fmt.Sprintf("listen: %s\nlog_level: error\ndebug: {pprof: %q}\ncascade: {stages: [neural]}\nbackends: [{name: up, type: openai, url: %q}]\n",
		addr, debug, fake.BaseURL()))
	served := make(chan error, 1)
	go func() { served <- runServe([]string{"-config", cfgPath}, io.Discard) }()
	waitUp(t, "http://"+addr+"/healthz")

	if code := getStatus(t, "http://"+debug+"/debug/pprof/heap"); code != http.StatusOK {
		t.Errorf("pprof on %s: status %d", debug, code)
	}
	if code := getStatus(t, "http://"+addr+"/debug/pprof/heap"); code == http.StatusOK {
		t.Error("the public listener serves pprof")
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve returned %v", err)
		}
	case <-time.After(30 * time.Second): // bounds a hang only; generous for a loaded machine
		t.Fatal("serve did not return after SIGTERM")
	}
	if resp, err := http.Get("http://" + debug + "/debug/pprof/"); err == nil {
		_ = resp.Body.Close()
		t.Fatal("pprof still served after shutdown")
	}
}

func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}
