package meter

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// backendState is a backend, its cached root process and its last walked tree. It is safe for
// concurrent use.
type backendState struct {
	coresC coresCache // treeCores for the tree's last PIDs
	info   BackendInfo
	local  bool
	port   int
	cgroup string

	mu      sync.Mutex
	pid     int
	start   uint64 // the cached PID's starttime, to notice a reused PID without a pidfd
	pidfd   int    // a pidfd for pid; -1 without one
	pidep   int    // an epoll set watching pidfd for pid's exit; -1 without one
	lastTry time.Time
	lastErr error
	// inProcess: the backend listens in this process (a test fake), found at lastTry on the
	// sockets inodes; re-checked every inProcessRecheck.
	inProcess bool
	inodes    []uint64

	tree      []int // the last tree walked from treeRoot; read-only once stored
	treeRoot  int
	treeCur   uint64 // the last PID known settled: when the walk began, or as far as a check got
	treeCurOK bool
	// treeUnborn is the PID after treeCur when a check found it handed out but with no /proc
	// entry: gone, or not yet born (see newPIDsOutside). The next check looks at it once more.
	treeUnborn uint64
	treeSeen   time.Time // when the tree was last known complete
	walks      uint64    // trees walked, for tests
	gpuHolders []int     // processes of tree seen holding a GPU device open

	cpuStat sampleFile // the cgroup's cpu.stat kept open

	edges edgeBook
}

// edgeBook splits a backend tree's CPU time among the calls open on it. At every span edge
// (a Begin or an End) the tree is sampled; the time it spent since the last edge is split
// equally among the spans open in between. A span alone is billed its tree's whole time; spans
// that overlapped are billed shares that add up to the tree's time over the union of their
// spans, never more.
type edgeBook struct {
	mu     sync.Mutex // held across the tree's sample, so edges are booked in the order read
	open   []*Span
	last   []procSample
	lastCg uint64
	lastAt time.Time
}

// book books an edge at which the tree read procs (or the cgroup cg) at now: the tree's time
// since the last edge goes in equal shares to the spans open. s joins the open spans when
// begin, or leaves them. b.edges.mu is held.
func (m *Meter) book(b *backendState, s *Span, begin bool, procs []procSample, cg uint64, now time.Time) {
	e := &b.edges
	m.bookInterval(b, procs, cg, now)
	e.last, e.lastCg, e.lastAt = append(e.last[:0], procs...), cg, now
	if begin {
		e.open = append(e.open, s)
		return
	}
	e.leave(s)
}

// bookInterval shares the tree's time since the last edge among the spans open. b.edges.mu is
// held.
func (m *Meter) bookInterval(b *backendState, procs []procSample, cg uint64, now time.Time) {
	e := &b.edges
	if n := len(e.open); n > 0 {
		var ns uint64
		short := false
		if b.cgroup != "" {
			ns = cg - min(cg, e.lastCg)
		} else {
			st := spanStart{m: m, start: e.lastAt}
			ns, short = treeDelta(e.last, procs, st.started)
		}
		wall := now.Sub(e.lastAt)
		for _, o := range e.open {
			o.share.cpu += float64(ns) / float64(n)
			o.share.union += float64(ns)
			if n == 1 {
				o.share.alone += float64(ns)
			}
			o.share.wall += wall / time.Duration(n)
			o.share.short = o.share.short || short
			o.share.split = o.share.split || n > 1
		}
	}
}

// leave takes s off the open spans, if it is there. b.edges.mu is held.
func (e *edgeBook) leave(s *Span) {
	if i := slices.Index(e.open, s); i >= 0 {
		e.open = slices.Delete(e.open, i, i+1)
	}
}

func newBackendState(b BackendInfo, sysfsRoot string) *backendState {
	st := &backendState{info: b, pidfd: -1, pidep: -1}
	st.port, st.local = loopbackPort(b.URL)
	if b.PIDFile != "" {
		st.local = true
	}
	if b.Cgroup != "" {
		st.local = true
		st.cgroup = b.Cgroup
		if !filepath.IsAbs(st.cgroup) {
			st.cgroup = filepath.Join(sysfsRoot, "fs", "cgroup", st.cgroup)
		}
	}
	return st
}

// close releases the pidfd and the files kept open. The state stays usable: it checks its
// root by /proc/<pid>/stat from here on.
func (b *backendState) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closePidfdLocked()
	if b.cpuStat != nil {
		_ = b.cpuStat.Close() // read-only
	}
}

// rootPID returns the backend's main process: the cached one while it lives, else the pid
// file's, else the one listening on the URL's port. A backend listening in this process gives
// errInProcess, decided once and re-checked every inProcessRecheck.
func (b *backendState) rootPID(p *procfs, fsys fileSystem) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inProcess {
		if time.Since(b.lastTry) < inProcessRecheck {
			return 0, errInProcess
		}
		b.lastTry = time.Now()
		if b.inodes != nil {
			if in, err := p.listeners(b.port); err == nil && slices.Equal(in, b.inodes) {
				return 0, errInProcess // the same socket: still ours
			}
		}
		b.inProcess, b.inodes, b.lastErr = false, nil, nil
	}
	if b.pid != 0 {
		if b.aliveLocked(p) {
			return b.pid, nil
		}
		b.dropLocked()
	}
	if b.lastErr != nil && time.Since(b.lastTry) < rediscoverEvery {
		return 0, b.lastErr
	}
	b.lastTry = time.Now()
	pid, inodes, err := b.discover(p, fsys)
	if err == nil && pid == p.self {
		// An in-process upstream (a test fake): its work cannot be told from the proxy's.
		b.inProcess, b.inodes, b.lastErr = true, inodes, nil
		return 0, errInProcess
	}
	if err == nil {
		var st procStat
		if st, err = p.stat(pid); err == nil {
			b.pid, b.start = pid, st.starttime
			b.pidfd, b.pidep = p.openPidfd(pid, st.starttime)
		}
	}
	b.lastErr = err
	if err != nil {
		return 0, err
	}
	return pid, nil
}

// noProcess returns rootPID's error without any read while it is known that the backend has
// no process to meter: it listens in this process, or it was looked for less than
// rediscoverEvery ago and not found.
func (b *backendState) noProcess() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.noProcessLocked()
}

func (b *backendState) noProcessLocked() error {
	switch {
	case b.inProcess && time.Since(b.lastTry) < inProcessRecheck:
		return errInProcess
	case b.pid == 0 && b.lastErr != nil && time.Since(b.lastTry) < rediscoverEvery:
		return b.lastErr
	}
	return nil
}

// aliveLocked reports whether the cached root process still runs: its pidfd has not turned
// readable (one epoll_wait; a pidfd never refers to a reused PID), or, without one, its
// /proc/<pid>/stat has the same start time and it is not a zombie.
func (b *backendState) aliveLocked(p *procfs) bool {
	if b.pidep >= 0 {
		if exited, err := pidfdExited(b.pidep); err == nil {
			return !exited
		}
	}
	st, err := p.stat(b.pid)
	return err == nil && st.starttime == b.start && st.state != 'Z'
}

// dropLocked forgets the root process and its tree.
func (b *backendState) dropLocked() {
	b.closePidfdLocked()
	b.pid, b.tree, b.gpuHolders = 0, nil, nil
}

// closePidfdLocked closes the root's pidfd and its watch.
func (b *backendState) closePidfdLocked() {
	if b.pidep >= 0 {
		closeFD(b.pidep)
		b.pidep = -1
	}
	if b.pidfd >= 0 {
		closeFD(b.pidfd)
		b.pidfd = -1
	}
}

// forgetTree drops the cached tree if it is still pids, so that the next span walks again.
func (b *backendState) forgetTree(pids []int) {
	b.mu.Lock()
	if len(b.tree) > 0 && len(pids) > 0 && &b.tree[0] == &pids[0] {
		b.tree = nil
	}
	b.mu.Unlock()
}

// usesGPU reports whether pid holds a GPU device open. A process seen holding one is
// remembered while the tree it belongs to is the cached one: without a new PID it is the same
// process, and a process keeps its device open while it runs. One seen without is scanned again
// every time, since it may open one at any moment.
func (b *backendState) usesGPU(p *procfs, pid int) (bool, error) {
	b.mu.Lock()
	held := slices.Contains(b.gpuHolders, pid)
	b.mu.Unlock()
	if held {
		return true, nil
	}
	used, err := p.usesGPU(pid)
	if used {
		b.mu.Lock()
		if slices.Contains(b.tree, pid) {
			b.gpuHolders = append(b.gpuHolders, pid)
		}
		b.mu.Unlock()
	}
	return used, err
}

// cgroupUsage reads the cgroup's CPU time, from its cpu.stat kept open. A cgroup removed and
// made again (a service restart) fails the read: the file is opened afresh next time.
func (b *backendState) cgroupUsage(fsys fileSystem) (uint64, error) {
	name := filepath.Join(b.cgroup, "cpu.stat")
	b.mu.Lock()
	f := b.cpuStat
	if f == nil {
		var err error
		if f, err = fsys.Open(name); err != nil {
			b.mu.Unlock()
			return 0, err
		}
		b.cpuStat = f
	}
	b.mu.Unlock()
	v, err := cgroupUsageFile(f, name)
	if err != nil {
		b.mu.Lock()
		if b.cpuStat == f {
			b.cpuStat = nil
			_ = f.Close() // read-only, and already failing
		}
		b.mu.Unlock()
	}
	return v, err
}

func (b *backendState) discover(p *procfs, fsys fileSystem) (int, []uint64, error) {
	if b.info.PIDFile != "" {
		pid, err := readPIDFile(fsys, b.info.PIDFile)
		return pid, nil, err
	}
	if b.port == 0 {
		return 0, nil, fmt.Errorf("%w: %s is not a loopback URL", ErrNoData, b.info.URL)
	}
	inodes, err := p.listeners(b.port)
	if err != nil {
		return 0, nil, err
	}
	pid, err := p.socketOwner(inodes)
	return pid, inodes, err
}

// loopbackPort returns the TCP port of a loopback http(s) URL.
func loopbackPort(raw string) (int, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return 0, false
	}
	host := u.Hostname()
	if !strings.EqualFold(host, "localhost") {
		ip := net.ParseIP(host)
		if ip == nil || !ip.IsLoopback() {
			return 0, false
		}
	}
	p := u.Port()
	if p == "" {
		if u.Scheme == "https" {
			return 443, true
		}
		return 80, true
	}
	n, ok := parseUint([]byte(p))
	if !ok || n == 0 || n > 65535 {
		return 0, false
	}
	return int(n), true
}
