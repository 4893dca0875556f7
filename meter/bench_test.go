package meter

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// BenchmarkSpan is the meter's cost per call, Begin and End together.
func BenchmarkSpan(b *testing.B) {
	b.Run("remote", func(b *testing.B) {
		m, err := New(Options{SkipProbe: true, nvml: noGPU, SysfsRoot: b.TempDir(),
			Backends: []BackendInfo{{Name: "openai", URL: "https://api.openai.com/v1"}}})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		b.ReportAllocs()
		for b.Loop() {
			m.Begin("openai").End(Work{Model: "gpt-4o", PromptTokens: 100, CompletionTokens: 100})
		}
	})
	// A real local backend found by its listening port: two processes, the live /proc, the
	// process CPU clocks, /proc/stat, and the RAPL fixture standing in for powercap.
	b.Run("local-live-proc", func(b *testing.B) {
		port, _, _ := startBackend(b, false)
		m, err := New(Options{SkipProbe: true, nvml: noGPU, SysfsRoot: sysFixture(b, "sys-two-socket.txtar"),
			DevRoot:  b.TempDir(),
			Backends: []BackendInfo{{Name: "local", URL: fmt.Sprintf("http://127.0.0.1:%d", port)}}})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		m.Begin("local").End(Work{}) // discovery, cached from here on
		b.ReportAllocs()
		for b.Loop() {
			m.Begin("local").End(Work{Model: "llama3", PromptTokens: 100, CompletionTokens: 100})
		}
	})
	// The same with no RAPL: what this machine pays.
	b.Run("local-live-proc-no-rapl", func(b *testing.B) {
		port, _, _ := startBackend(b, false)
		m, err := New(Options{SkipProbe: true, nvml: noGPU, SysfsRoot: b.TempDir(), DevRoot: b.TempDir(),
			Backends: []BackendInfo{{Name: "local", URL: fmt.Sprintf("http://127.0.0.1:%d", port)}}})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		m.Begin("local").End(Work{})
		b.ReportAllocs()
		for b.Loop() {
			m.Begin("local").End(Work{Model: "llama3", PromptTokens: 100, CompletionTokens: 100})
		}
	})
}

// BenchmarkRead is the cost of one read of each counter.
func BenchmarkRead(b *testing.B) {
	live := &procfs{fs: osFS{}, root: "/proc", cpuClock: processCPUClock}
	files := &procfs{fs: osFS{}, root: "/proc"}
	pid := os.Getpid()
	b.Run("rapl-fixture-2-sockets", func(b *testing.B) {
		r, err := detectRAPL(osFS{}, sysFixture(b, "sys-two-socket.txtar"), time.Now, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.read(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("host-proc-stat", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := live.hostTimes(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("process-cpu-clock", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := live.cpuNs(pid); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("process-cpu-schedstat", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := files.cpuNs(pid); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proxy-cpu", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := selfCPU(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("process-stat", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := live.stat(pid); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("children", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			live.children(pid, nil)
		}
	})
	b.Run("gpu-fd-scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			live.usesGPU(pid)
		}
	})
	// Discovery by port: the uncached cost, paid once per backend (and again when it vanishes).
	b.Run("discover-listener", func(b *testing.B) {
		port, want, _ := startBackend(b, false)
		b.ReportAllocs()
		for b.Loop() {
			in, err := live.listeners(port)
			if err != nil {
				b.Fatal(err)
			}
			if got, err := live.socketOwner(in); err != nil || got != want {
				b.Fatalf("owner = %d, %v", got, err)
			}
		}
	})
}
