package meter

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

func procFixture(t testing.TB) (root string, p *procfs) {
	root = unpack(t, "proc.txtar", t.TempDir())
	return root, &procfs{fs: osFS{}, root: root}
}

func TestProcFixture(t *testing.T) {
	root, p := procFixture(t)

	inodes, err := p.listeners(11434)
	if err != nil || !slices.Equal(inodes, []uint64{34892}) {
		t.Fatalf("listeners(11434) = %v, %v; want [34892] (the established socket on the port is not a listener)", inodes, err)
	}
	if in, _ := p.listeners(8001); !slices.Equal(in, []uint64{41000}) {
		t.Fatalf("listeners(8001) from tcp6 = %v", in)
	}
	owner, err := p.socketOwner(inodes)
	if err != nil || owner != 100 {
		t.Fatalf("socketOwner = %d, %v; want 100", owner, err)
	}
	if _, err := p.socketOwner(nil); err == nil {
		t.Fatal("socketOwner of nothing found an owner")
	}

	// 101 is a child of thread 107, not of the main thread: both children files are read.
	if got := p.tree(100, nil); !slices.Equal(got, []int{100, 101, 102}) {
		t.Fatalf("tree(100) = %v", got)
	}
	if got, _ := p.scanChildren(101, nil); !slices.Equal(got, []int{102}) {
		t.Fatalf("scanChildren(101) = %v", got)
	}

	st, err := p.statComm(102)
	if err != nil || st.comm != "gpu (worker) x" || st.ppid != 101 || st.ticks != 15 || st.starttime != 3000 {
		t.Fatalf("stat(102) = %+v, %v", st, err)
	}
	// schedstat sums the threads (1.5 s + 0.6 s); stat's 2 s of ticks is smaller.
	if ns, err := p.cpuNs(100); err != nil || ns != 2_100_000_000 {
		t.Fatalf("cpuNs(100) = %d, %v", ns, err)
	}
	// 101's ticks (10 s) exceed its one thread's schedstat (9 s): a thread exited.
	if ns, _ := p.cpuNs(101); ns != 10_000_000_000 {
		t.Fatalf("cpuNs(101) = %d", ns)
	}

	h, err := p.hostTimes()
	if err != nil || h.busy != (50577+10+17398+5+247)*tickNs || h.total != h.busy+(60394+235+33)*tickNs {
		t.Fatalf("hostTimes = %+v, %v", h, err)
	}

	if g, _ := p.usesGPU(102); !g {
		t.Fatal("102 holds /dev/nvidia0 open but usesGPU says no")
	}
	if g, _ := p.usesGPU(101); g {
		t.Fatal("/dev/nvidiactl is not a compute device")
	}

	pid, err := readPIDFile(osFS{}, filepath.Join(root, "ollama.pid"))
	if err != nil || pid != 101 {
		t.Fatalf("pid file = %d, %v", pid, err)
	}
	cg := filepath.Join(root, "cgroup", "ollama.service")
	if ns, err := cgroupUsage(osFS{}, cg); err != nil || ns != 1_234_567_000 {
		t.Fatalf("cgroup usage = %d, %v", ns, err)
	}
	if ps, err := cgroupProcs(osFS{}, cg, nil); err != nil || !slices.Equal(ps, []int{100, 101}) {
		t.Fatalf("cgroup procs = %v, %v", ps, err)
	}
}

func TestGPUNode(t *testing.T) {
	for target, want := range map[string]bool{
		"/dev/nvidia0": true, "/dev/nvidia15": true, "/dev/kfd": true, "/dev/dri/renderD128": true,
		"/dev/nvidiactl": false, "/dev/nvidia-uvm": false, "/dev/dri/card0": false, "/dev/null": false,
		"socket:[1]": false, "/dev/nvidia": false,
	} {
		if gpuNode(target) != want {
			t.Errorf("gpuNode(%q) = %v", target, !want)
		}
	}
}

func TestLoopbackPort(t *testing.T) {
	for u, want := range map[string]int{
		"http://127.0.0.1:11434": 11434, "http://localhost:8080/v1": 8080, "http://[::1]:9000": 9000,
		"http://127.0.0.2": 80, "https://localhost": 443,
		"https://api.openai.com/v1": 0, "http://10.0.0.5:11434": 0, "http://127.0.0.1:99999": 0, "::": 0,
	} {
		got, ok := loopbackPort(u)
		if got != want || ok != (want != 0) {
			t.Errorf("loopbackPort(%q) = %d, %v; want %d", u, got, ok, want)
		}
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("102 (gpu (worker) x) S 101 102 102 0 -1 4194560 100 0 0 0 10 5 0 0 20 0 2 0 3000 1000000 100"))
	f.Add([]byte("1 (a) R"))
	f.Add([]byte(")("))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseStat(b)
		if err == nil && st.starttime == 0 && st.ticks == 0 && st.ppid == 0 && len(b) < 20 {
			t.Fatalf("accepted %q as %+v", b, st)
		}
	})
}

func FuzzParseListeners(f *testing.F) {
	f.Add([]byte("sl local rem st\n0: 0100007F:2CAA 00000000:0000 0A 0:0 0:0 0 0 0 34892 1\n"), 11434)
	f.Add([]byte("\n\n"), 0)
	f.Fuzz(func(t *testing.T, b []byte, port int) {
		for _, ino := range parseListeners(b, port, nil) {
			if ino == 0 {
				t.Fatal("inode 0")
			}
		}
	})
}

func FuzzParseHostStat(f *testing.F) {
	f.Add([]byte("cpu  50577 10 17398 60394 235 5 247 33 0 0\n"))
	f.Add([]byte("cpu 1 2 3 4 5 6 7\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHostStat(b)
		if err == nil && h.busy > h.total {
			t.Fatalf("busy %d > total %d", h.busy, h.total)
		}
	})
}

// TestParentOfLive: on the live /proc a PID's parent comes from a pidfd, and is the parent its
// /proc/<pid>/stat shows, for a process, for a thread (its process's parent) and for a child;
// a PID with no task is gone (fs.ErrNotExist), as a stat that cannot be opened says.
func TestParentOfLive(t *testing.T) {
	if _, err := pidParent(os.Getpid()); errors.Is(err, errNoPidInfo) {
		t.Skip("this kernel cannot tell a PID's parent through a pidfd")
	}
	live := &procfs{fs: osFS{}, root: "/proc", live: true, pidParent: pidParent}
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Skip("no sleep:", err)
	}
	defer func() {
		_ = child.Process.Kill() // a test child: its status is not the test's
		_ = child.Wait()
	}()
	pids := []int{os.Getpid(), child.Process.Pid}
	tids, err := osFS{}.ReadDirNames("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		if n, err := strconv.Atoi(tid); err == nil && n != os.Getpid() {
			pids = append(pids, n) // a thread of this process
			break
		}
	}
	for _, pid := range pids {
		st, err := live.stat(pid)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pidParent(pid)
		if err != nil || got != st.ppid {
			t.Errorf("pidParent(%d) = %d, %v; its stat says %d", pid, got, err, st.ppid)
		}
		if got, err := live.parentOf(pid); err != nil || got != st.ppid {
			t.Errorf("parentOf(%d) = %d, %v; its stat says %d", pid, got, err, st.ppid)
		}
	}
	if live.noPidInfo.Load() {
		t.Error("parentOf fell back to the stat on a kernel that answers through a pidfd")
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Skip("no true:", err)
	}
	if _, err := pidParent(gone.Process.Pid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("pidParent of a reaped child = %v, want fs.ErrNotExist", err)
	}
	if _, err := live.parentOf(gone.Process.Pid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("parentOf of a reaped child = %v, want fs.ErrNotExist", err)
	}
}

// TestParentOfFallsBack: where the kernel cannot tell a PID's parent through a pidfd, parentOf
// reads the stat, and from then on asks the pidfd no more; a PID the pidfd finds no task for is
// gone without a stat.
func TestParentOfFallsBack(t *testing.T) {
	_, p := procFixture(t)
	asked := 0
	p.pidParent = func(int) (int, error) { asked++; return 0, errNoPidInfo }
	for range 2 {
		if got, err := p.parentOf(102); err != nil || got != 101 {
			t.Fatalf("parentOf(102) = %d, %v; want 101 from its stat", got, err)
		}
	}
	if asked != 1 {
		t.Errorf("the pidfd was asked %d times, want once", asked)
	}
	_, p = procFixture(t)
	p.pidParent = func(int) (int, error) { return 0, fs.ErrNotExist }
	if _, err := p.parentOf(102); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("parentOf of a PID the pidfd found no task for = %v, want fs.ErrNotExist", err)
	}
}
