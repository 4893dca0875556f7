package meter

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/internal/testenv/coldbench"
)

// BenchmarkBeginEnd is the meter's cost per call, Begin and End together.
func BenchmarkBeginEnd(b *testing.B) {
	span := func(b *testing.B, m *Meter, backend string) {
		m.Begin(backend).End(Work{}) // discovery, cached from here on
		be := m.backends[backend]
		walks := be.walks
		b.ReportAllocs()
		for b.Loop() {
			m.Begin(backend).End(Work{Model: "llama3", PromptTokens: 100, CompletionTokens: 100})
		}
		// Tree walks: a process created anywhere on the host during the run makes End walk.
		b.ReportMetric(float64(be.walks-walks)/float64(b.N), "walks/op")
	}
	meter := func(b *testing.B, sysfs string, backends ...BackendInfo) *Meter {
		m, err := New(Options{SkipProbe: true, nvml: noGPU, SysfsRoot: sysfs, DevRoot: b.TempDir(), Backends: backends})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { closeOK(b, m) })
		return m
	}
	b.Run("remote", func(b *testing.B) {
		m := meter(b, b.TempDir(), BackendInfo{Name: "openai", URL: "https://api.openai.com/v1"})
		span(b, m, "openai")
	})
	// An upstream listening in this process, as the proxy's benchmarks use: no-process.
	b.Run("no-process", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = ln.Close() }() // a test listener: nothing to lose
		m := meter(b, b.TempDir(), BackendInfo{Name: "fake", URL: fmt.Sprintf("http://%s", ln.Addr())})
		span(b, m, "fake")
	})
	// A real local backend found by its listening port: two processes on the live /proc, and
	// the RAPL fixture standing in for powercap (so /proc/stat and the proxy's CPU clock too).
	b.Run("local-live-proc", func(b *testing.B) {
		port, _, _ := startBackend(b, false)
		m := meter(b, sysFixture(b, "sys-two-socket.txtar"), BackendInfo{Name: "local", URL: fmt.Sprintf("http://127.0.0.1:%d", port)})
		span(b, m, "local")
	})
	// The same with no RAPL: what this machine pays.
	b.Run("local-live-proc-no-rapl", func(b *testing.B) {
		port, _, _ := startBackend(b, false)
		m := meter(b, b.TempDir(), BackendInfo{Name: "local", URL: fmt.Sprintf("http://127.0.0.1:%d", port)})
		span(b, m, "local")
	})
	// The same with the caches evicted before each Begin and each End, as the server runs them
	// between other work: begin-ns and end-ns are the medians of each edge's own time.
	b.Run("local-live-proc-no-rapl-cold", func(b *testing.B) {
		port, _, _ := startBackend(b, false)
		m := meter(b, b.TempDir(), BackendInfo{Name: "local", URL: fmt.Sprintf("http://127.0.0.1:%d", port)})
		m.Begin("local").End(Work{})
		begins, ends := coldbench.New(), coldbench.New()
		b.ReportAllocs()
		for b.Loop() {
			var s *Span
			begins.Time(b, func() { s = m.Begin("local") })
			ends.Time(b, func() { s.End(Work{Model: "llama3", PromptTokens: 100, CompletionTokens: 100}) })
		}
		begins.Report(b, "begin-ns")
		ends.Report(b, "end-ns")
	})
	// As if a process had been created on the host during every call: End walks the tree.
	b.Run("local-live-proc-no-rapl-walk", func(b *testing.B) {
		port, _, _ := startBackend(b, false)
		m := meter(b, b.TempDir(), BackendInfo{Name: "local", URL: fmt.Sprintf("http://127.0.0.1:%d", port)})
		be := m.backends["local"]
		m.Begin("local").End(Work{})
		b.ReportAllocs()
		for b.Loop() {
			s := m.Begin("local")
			be.mu.Lock()
			be.treeCurOK = false
			be.mu.Unlock()
			s.End(Work{Model: "llama3", PromptTokens: 100, CompletionTokens: 100})
		}
	})
	// As if one PID had been handed out on the host during every call, outside the tree: End
	// reads that PID's stat rather than walk.
	b.Run("local-live-proc-no-rapl-new-pid", func(b *testing.B) {
		port, _, _ := startBackend(b, false)
		m := meter(b, b.TempDir(), BackendInfo{Name: "local", URL: fmt.Sprintf("http://127.0.0.1:%d", port)})
		be := m.backends["local"]
		m.Begin("local").End(Work{})
		walks := be.walks
		b.ReportAllocs()
		for b.Loop() {
			s := m.Begin("local")
			be.mu.Lock()
			be.treeCur--
			be.mu.Unlock()
			s.End(Work{Model: "llama3", PromptTokens: 100, CompletionTokens: 100})
		}
		b.ReportMetric(float64(be.walks-walks)/float64(b.N), "walks/op")
	})
	// What benchout's neural phase pays on this box: a local backend of one process (a child
	// sleep named by a pid file), no RAPL, no NVML.
	b.Run("local-sleep-no-rapl", func(b *testing.B) {
		cmd := exec.Command("sleep", "3600")
		if err := cmd.Start(); err != nil {
			b.Skip("no sleep:", err)
		}
		b.Cleanup(func() {
			_ = cmd.Process.Kill() // a test child: its status is not the benchmark's
			_ = cmd.Wait()
		})
		pidFile := filepath.Join(b.TempDir(), "backend.pid")
		if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
			b.Fatal(err)
		}
		m := meter(b, b.TempDir(), BackendInfo{Name: "local", URL: "http://127.0.0.1:1", PIDFile: pidFile})
		if f := m.Begin("local").End(Work{}); f.Method == MethodTokenModel {
			b.Fatalf("no process found behind the pid file: %+v", f)
		}
		span(b, m, "local")
	})
	// A real backend, e.g. Ollama with a model loaded: EOC_METER_BENCH_URL=http://127.0.0.1:11434.
	b.Run("env-backend", func(b *testing.B) {
		u := os.Getenv("EOC_METER_BENCH_URL")
		if u == "" {
			b.Skip("EOC_METER_BENCH_URL is not set")
		}
		m := meter(b, b.TempDir(), BackendInfo{Name: "env", URL: u})
		m.Begin("env").End(Work{})
		if f := m.Begin("env").End(Work{}); f.Method == MethodTokenModel {
			b.Fatalf("no process found behind %s: %+v", u, f)
		}
		span(b, m, "env")
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
	// The last PID handed out, as a span's End reads it: /proc/loadavg's last field, or the same
	// number from /proc/sys/kernel/ns_last_pid.
	for _, name := range []string{"loadavg", "sys/kernel/ns_last_pid"} {
		b.Run("last-pid-"+filepath.Base(name), func(b *testing.B) {
			f, err := osFS{}.Open("/proc/" + name)
			if err != nil {
				b.Skip(err)
			}
			defer func() { _ = f.Close() }() // read-only
			buf := make([]byte, 128)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.ReadStart(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
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
	// A new PID's parent, as a span's End asks it of each PID handed out since the last check.
	b.Run("process-parent", func(b *testing.B) {
		if _, err := pidParent(pid); err != nil {
			b.Skip(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := pidParent(pid); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("children", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = live.children(pid, nil)
		}
	})
	b.Run("gpu-fd-scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = live.usesGPU(pid)
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
