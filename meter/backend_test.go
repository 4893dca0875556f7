package meter

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// helperEnv makes the test binary act as a stand-in backend ("backend", "idle-backend") or as
// the backend's CPU-burning child ("burner") instead of running tests.
const helperEnv = "EOC_METER_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "backend":
		helperBackend(true)
		return
	case "idle-backend":
		helperBackend(false)
		return
	case "burner":
		stop := burn(1)
		_, _ = io.Copy(io.Discard, os.Stdin) // until the parent goes away
		stop()
		return
	}
	os.Exit(m.Run())
}

// helperBackend listens on 127.0.0.1:0, starts a child that burns CPU, burns CPU itself when
// busy is set, reports "port childpid", and lives until its stdin closes. Each "spawn" line on
// its stdin starts one more burning child, as Ollama starts a runner, and reports its PID.
func helperBackend(busy bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), helperEnv+"=burner")
	childIn, _ := child.StdinPipe()
	if !busy {
		child.Env = append(os.Environ(), helperEnv+"=idle")
	}
	if err := child.Start(); err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	if busy {
		defer burn(1)()
	}
	fmt.Printf("%d %d\n", ln.Addr().(*net.TCPAddr).Port, child.Process.Pid)
	var runners []*exec.Cmd
	for sc := bufio.NewScanner(os.Stdin); sc.Scan(); {
		if sc.Text() != "spawn" {
			continue
		}
		r := exec.Command(os.Args[0], "-test.run=^$")
		r.Env = append(os.Environ(), helperEnv+"=burner")
		if _, err := r.StdinPipe(); err != nil || r.Start() != nil {
			fmt.Println("ERR spawn")
			continue
		}
		runners = append(runners, r)
		fmt.Println(r.Process.Pid)
	}
	// Tearing down test children: a child already gone is fine.
	_ = childIn.Close()
	_ = child.Process.Kill()
	_ = child.Wait()
	for _, r := range runners {
		_ = r.Process.Kill()
		_ = r.Wait()
	}
}

// startBackend runs the helper backend and returns its port, its PID and its child's PID.
func startBackend(t testing.TB, busy bool) (port, pid, childPID int) {
	t.Helper()
	port, pid, childPID, _ = startSpawningBackend(t, busy)
	return port, pid, childPID
}

// startSpawningBackend is startBackend with spawn, which makes the backend start one more
// child and returns its PID.
func startSpawningBackend(t testing.TB, busy bool) (port, pid, childPID int, spawn func() int) {
	t.Helper()
	mode := "idle-backend"
	if busy {
		mode = "backend"
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = in.Close() // the child exits on EOF; its status is not the test's
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	rd := bufio.NewReader(out)
	line, err := rd.ReadString('\n')
	if err != nil {
		t.Fatalf("helper backend: %v", err)
	}
	if _, err := fmt.Sscanf(line, "%d %d", &port, &childPID); err != nil {
		t.Fatalf("helper backend said %q", line)
	}
	spawn = func() int {
		t.Helper()
		if _, err := io.WriteString(in, "spawn\n"); err != nil {
			t.Fatal(err)
		}
		line, err := rd.ReadString('\n')
		var pid int
		if _, serr := fmt.Sscanf(line, "%d", &pid); err != nil || serr != nil {
			t.Fatalf("helper backend answered spawn with %q, %v", line, err)
		}
		return pid
	}
	return port, cmd.Process.Pid, childPID, spawn
}

func TestRealBackendDiscoveryAndCPU(t *testing.T) {
	port, pid, childPID := startBackend(t, true)
	m, err := New(Options{SkipProbe: true, Backends: []BackendInfo{
		{Name: "local", URL: fmt.Sprintf("http://127.0.0.1:%d", port)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, m)

	tree, err := m.treePIDs(m.backends["local"], nil)
	if err != nil {
		t.Fatal(err)
	}
	if tree[0] != pid || !slices.Contains(tree, childPID) {
		t.Fatalf("tree = %v, want the listener %d first and its child %d", tree, pid, childPID)
	}

	s := m.Begin("local")
	time.Sleep(300 * time.Millisecond)
	f := s.End(Work{Model: "stand-in", PromptTokens: 10, CompletionTokens: 10})
	t.Logf("figure: %+v", f)

	if f.CPUJoules <= 0 {
		t.Fatalf("the burning tree got no CPU energy: %+v", f)
	}
	// The tree cannot have used more than every core for the whole span.
	if limit := time.Since(s.start).Seconds() * float64(runtime.NumCPU()) * DefaultCPUWattsPerCore; f.CPUJoules > limit {
		t.Fatalf("CPU energy %v J is more than all cores could draw (%v J)", f.CPUJoules, limit)
	}
	if f.GPUJoules != 0 || f.Coverage != energy.CoverageWhole {
		t.Fatalf("no GPU here, yet %+v", f)
	}
	if m.rapl == nil {
		if f.Grade != energy.Estimated || f.Method != MethodCPUTimeModel || f.Reason != ReasonNoRAPL {
			t.Fatalf("without RAPL the figure is %+v; want a cpu-time-model estimate with reason no-rapl", f)
		}
	} else if f.Grade == energy.Estimated && f.Reason == "" {
		t.Fatalf("estimated without a reason: %+v", f)
	}

	rep := m.Status(context.Background(), 50*time.Millisecond)
	if len(rep.Backends) != 1 || len(rep.Backends[0].Processes) < 2 {
		t.Fatalf("status backends = %+v", rep.Backends)
	}
	for _, p := range rep.Backends[0].Processes {
		if !strings.HasPrefix(p.Comm, "meter.test") {
			t.Errorf("process %+v is not the helper", p)
		}
	}
}

// TestRealBackendRediscovery: when the listener goes away, the cached PID is dropped and the
// backend has no process; a new listener on the same URL is not found by the old PID.
func TestRealBackendVanishes(t *testing.T) {
	port, pid, _ := startBackend(t, false)
	m, err := New(Options{SkipProbe: true, Backends: []BackendInfo{
		{Name: "local", URL: fmt.Sprintf("http://127.0.0.1:%d", port)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, m)
	b := m.backends["local"]
	if got, err := b.rootPID(m.proc, m.fs); err != nil || got != pid {
		t.Fatalf("rootPID = %d, %v; want %d", got, err, pid)
	}
	p, _ := os.FindProcess(pid)
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := b.rootPID(m.proc, m.fs)
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a killed backend is still found")
		}
		time.Sleep(20 * time.Millisecond)
	}
	f := m.Begin("local").End(Work{CompletionTokens: 10})
	if f.Method != MethodTokenModel || f.Reason != ReasonNoProcess || f.Joules != 10*DefaultLocalJPerCompletion {
		t.Fatalf("figure for a vanished backend = %+v", f)
	}
}

// TestInProcessBackend: a loopback upstream served by this very process (an httptest fake) has
// no processes of its own; it is priced by tokens with reason no-process.
func TestInProcessBackend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }() // a test listener: nothing to lose
	m, err := New(Options{SkipProbe: true, nvml: noGPU, SysfsRoot: t.TempDir(), Backends: []BackendInfo{
		{Name: "fake", URL: fmt.Sprintf("http://%s", ln.Addr())},
	}, TokenModels: []TokenModel{{Patterns: []string{"fake-*"}, JPerPrompt: 1, JPerCompletion: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, m)
	f := m.Begin("fake").End(Work{Model: "fake-1", PromptTokens: 12, CompletionTokens: 4})
	if f.Method != MethodTokenModel || f.Reason != ReasonNoProcess || f.Joules != 16 {
		t.Fatalf("figure = %+v", f)
	}
}
