package meter

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// userHZ is the kernel's USER_HZ, the unit of /proc/stat and /proc/<pid>/stat times. It is 100
// on every Linux architecture Go supports (procfs assumes the same).
const userHZ = 100

const tickNs = uint64(time.Second / userHZ)

// procfs reads processes and host CPU time from a /proc tree. It is safe for concurrent use.
// The zero value with fs and root set is usable: it opens nothing and reads each file afresh.
type procfs struct {
	fs   fileSystem
	root string
	self int // this process's PID
	// cpuClock reads a process's CPU time in ns from the kernel's per-process CPU clock, when the
	// tree is the live /proc; nil otherwise. live also allows pidfds.
	cpuClock func(pid int) (uint64, error)
	live     bool
	// pidParent tells a PID's parent through a pidfd (the package's pidParent) on the live /proc;
	// nil otherwise. noPidInfo: it answered errNoPidInfo once, so parentOf reads the stat.
	pidParent func(pid int) (int, error)
	noPidInfo atomic.Bool

	// Kept open by the Meter when it needs them; nil reads each file afresh (stat) or not at all
	// (the last PID).
	lastPIDFile sampleFile // the last PID created, to know that the process set did not change
	lastPIDNs   bool       // lastPIDFile is sys/kernel/ns_last_pid (one number), not loadavg
	hostStat    sampleFile // host CPU time, read only when RAPL is live
}

// procStat is what the meter reads from /proc/<pid>/stat.
type procStat struct {
	comm      string
	state     byte
	ppid      int
	ticks     uint64 // utime + stime
	starttime uint64 // clock ticks after boot
}

// stat reads /proc/<pid>/stat, all but the command name (statComm). The command name may hold
// spaces and parentheses, so the fields are counted from the last ')'.
func (p *procfs) stat(pid int) (procStat, error) {
	return p.readStat(pid, false)
}

// errNoPidInfo says the kernel cannot tell a PID's parent through a pidfd.
var errNoPidInfo = errors.New("meter: no PIDFD_GET_INFO")

// parentOf is the PID of pid's parent as its /proc/<pid>/stat shows it: on the live /proc asked
// of a pidfd (pidParent), which costs about a third of reading the stat, else, or where the
// kernel cannot answer so, read from the stat. fs.ErrNotExist when pid has no process or thread.
func (p *procfs) parentOf(pid int) (int, error) {
	if p.pidParent != nil && !p.noPidInfo.Load() {
		ppid, err := p.pidParent(pid)
		if !errors.Is(err, errNoPidInfo) {
			return ppid, err
		}
		p.noPidInfo.Store(true)
	}
	st, err := p.stat(pid)
	return st.ppid, err
}

// statComm is stat with the command name.
func (p *procfs) statComm(pid int) (procStat, error) {
	return p.readStat(pid, true)
}

func (p *procfs) readStat(pid int, comm bool) (procStat, error) {
	buf := getBuf()
	defer putBuf(buf)
	n, err := p.fs.ReadFile(p.path(pid, "stat"), buf[:1024])
	if err != nil {
		return procStat{}, err
	}
	st, err := parseStat(buf[:n])
	if err == nil && comm {
		st.comm = string(buf[bytes.IndexByte(buf[:n], '(')+1 : bytes.LastIndexByte(buf[:n], ')')])
	}
	return st, err
}

func parseStat(b []byte) (procStat, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open || end+2 >= len(b) {
		return procStat{}, errors.New("malformed stat")
	}
	var st procStat // the command name, b[open+1:end], only when asked (readStat): it allocates
	// Fields after the comm, numbered from 3 (state) as in proc(5).
	rest := b[end+2:]
	field := 3
	for len(rest) > 0 && field <= 22 {
		i := bytes.IndexByte(rest, ' ')
		var tok []byte
		if i < 0 {
			tok, rest = bytes.TrimSpace(rest), nil
		} else {
			tok, rest = rest[:i], rest[i+1:]
		}
		switch field {
		case 3:
			if len(tok) > 0 {
				st.state = tok[0]
			}
		case 4:
			v, _ := strconv.Atoi(string(tok))
			st.ppid = v
		case 14, 15:
			v, ok := parseUint(tok)
			if !ok {
				return procStat{}, errors.New("malformed stat times")
			}
			st.ticks += v
		case 22:
			v, ok := parseUint(tok)
			if !ok {
				return procStat{}, errors.New("malformed stat starttime")
			}
			st.starttime = v
		}
		field++
	}
	if field <= 22 {
		return procStat{}, errors.New("short stat")
	}
	return st, nil
}

// path is <root>/<pid>[/elem...], in one allocation.
func (p *procfs) path(pid int, elem ...string) string {
	var num [20]byte
	digits := strconv.AppendInt(num[:0], int64(pid), 10)
	size := len(p.root) + 1 + len(digits)
	for _, e := range elem {
		size += 1 + len(e)
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(p.root)
	b.WriteByte('/')
	b.Write(digits)
	for _, e := range elem {
		b.WriteByte('/')
		b.WriteString(e)
	}
	return b.String()
}

// cpuNs is a process's CPU time in ns, all its threads included. On the live /proc it is one
// clock_gettime on the process's CPU clock (exact, and it keeps the time of threads that have
// exited); otherwise it sums /proc/<pid>/task/*/schedstat, whose first field is each thread's
// time on CPU in ns, and falls back to utime+stime from /proc/<pid>/stat (10 ms ticks) when that
// is larger, since exited threads leave schedstat.
func (p *procfs) cpuNs(pid int) (uint64, error) {
	if p.cpuClock != nil {
		if v, err := p.cpuClock(pid); err == nil {
			return v, nil
		}
	}
	st, err := p.stat(pid)
	if err != nil {
		return 0, err
	}
	tids, err := p.fs.ReadDirNames(p.path(pid, "task"))
	if err != nil {
		return st.ticks * tickNs, nil
	}
	var sum uint64
	buf := getBuf()
	defer putBuf(buf)
	for _, tid := range tids {
		n, err := p.fs.ReadFile(p.path(pid, "task", tid, "schedstat"), buf[:96])
		if err != nil {
			continue // the thread exited
		}
		b := buf[:n]
		if i := bytes.IndexByte(b, ' '); i > 0 {
			b = b[:i]
		}
		if v, ok := parseUint(bytes.TrimSpace(b)); ok {
			sum += v
		}
	}
	return max(sum, st.ticks*tickNs), nil
}

// children returns the PIDs whose parent is pid, from /proc/<pid>/task/*/children (a child
// forked by any thread is listed under that thread). Without CONFIG_PROC_CHILDREN it scans
// /proc/*/stat for the parent.
func (p *procfs) children(pid int, dst []int) ([]int, error) {
	tids, err := p.fs.ReadDirNames(p.path(pid, "task"))
	if err != nil {
		return dst, err
	}
	buf := getBuf()
	defer putBuf(buf)
	found := false
	for _, tid := range tids {
		n, err := p.fs.ReadFile(p.path(pid, "task", tid, "children"), buf[:])
		if err != nil {
			continue
		}
		found = true
		for f := range bytes.FieldsSeq(buf[:n]) {
			if v, ok := parseUint(f); ok && v <= math.MaxInt32 {
				dst = append(dst, int(v))
			}
		}
	}
	if found || len(tids) == 0 {
		return dst, nil
	}
	return p.scanChildren(pid, dst)
}

func (p *procfs) scanChildren(pid int, dst []int) ([]int, error) {
	names, err := p.fs.ReadDirNames(p.root)
	if err != nil {
		return dst, err
	}
	for _, n := range names {
		c, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if st, err := p.stat(c); err == nil && st.ppid == pid {
			dst = append(dst, c)
		}
	}
	return dst, nil
}

// tree returns pid and all its descendants, pid first.
func (p *procfs) tree(pid int, dst []int) []int {
	dst = append(dst, pid)
	for i := len(dst) - 1; i < len(dst); i++ {
		if len(dst) > 4096 {
			break // a fork bomb is not a backend
		}
		dst, _ = p.children(dst[i], dst)
	}
	return dst
}

// isBlank is bytes.Fields's notion of a separator, for ASCII.
func isBlank(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// hostCPU is the host's CPU time from the first line of /proc/stat, in ns.
type hostCPU struct {
	busy, total uint64
}

// hostTimes reads /proc/stat's "cpu" line. Busy is user+nice+system+irq+softirq (guest time is
// inside user); idle, iowait and steal are not this host's work.
func (p *procfs) hostTimes() (hostCPU, error) {
	buf := getBuf()
	defer putBuf(buf)
	var n int
	var err error
	if p.hostStat != nil {
		n, err = p.hostStat.ReadStart(buf[:512])
	} else {
		n, err = p.fs.ReadFile(p.root+"/stat", buf[:512])
	}
	if err != nil {
		return hostCPU{}, err
	}
	return parseHostStat(buf[:n])
}

// lastPID is the PID most recently handed out in this PID namespace: ns_last_pid, or the last
// field of /proc/loadavg. Every fork and every new thread moves it on, so while it stands still
// no process can have joined a tree, and no PID can have been reused. ok is false when it
// cannot be read (no file kept open, or a malformed one).
func (p *procfs) lastPID() (pid uint64, ok bool) {
	if p.lastPIDFile == nil {
		return 0, false
	}
	var buf [128]byte
	if n, ok, err := readStartRaw(p.lastPIDFile, buf[:]); ok {
		return p.lastPIDOf(buf[:n], err)
	}
	pb := getBuf()
	defer putBuf(pb)
	n, err := p.lastPIDFile.ReadStart(pb[:128])
	return p.lastPIDOf(pb[:n], err)
}

// lastPIDOf parses what a read of the last PID's file gave.
func (p *procfs) lastPIDOf(b []byte, err error) (uint64, bool) {
	if err != nil {
		return 0, false
	}
	if p.lastPIDNs {
		v, err := parseUintFile(b, "ns_last_pid")
		return v, err == nil
	}
	return parseLastPID(b)
}

// parseLastPID takes the last field of a /proc/loadavg line ("0.35 3.74 5.55 2/108 15847").
func parseLastPID(b []byte) (uint64, bool) {
	b = bytes.TrimRight(b, " \n")
	if bytes.Count(b, []byte{' '}) != 4 || len(b) == 0 || b[0] == ' ' || bytes.Contains(b, []byte("  ")) { // five non-empty fields
		return 0, false
	}
	return parseUint(b[bytes.LastIndexByte(b, ' ')+1:])
}

// openPidfd opens a pidfd for pid on the live /proc, checking that pid is still the process
// that started at start, and an epoll set watching it for the process's exit (pidfdWatch). It
// returns -1, -1 where pidfds or epoll are unavailable (a fixture /proc, Linux before 5.3, a
// seccomp filter) or the process is already gone.
func (p *procfs) openPidfd(pid int, start uint64) (fd, watch int) {
	if !p.live {
		return -1, -1
	}
	fd, err := pidfdOpen(pid)
	if err != nil {
		return -1, -1
	}
	if st, err := p.stat(pid); err != nil || st.starttime != start {
		closeFD(fd) // the PID was reused between the check and the open
		return -1, -1
	}
	if watch, err = pidfdWatch(fd); err != nil {
		closeFD(fd)
		return -1, -1
	}
	return fd, watch
}

var errHostStat = errors.New("malformed /proc/stat")

func parseHostStat(b []byte) (hostCPU, error) {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	// Fields split on blanks without allocating: "cpu", then up to ten numbers (seven at least).
	var v [10]uint64
	n := 0 // fields seen, "cpu" included
	for len(b) > 0 {
		if isBlank(b[0]) {
			b = b[1:]
			continue
		}
		end := 0
		for end < len(b) && !isBlank(b[end]) {
			end++
		}
		f := b[:end]
		b = b[end:]
		switch {
		case n == 0:
			if string(f) != "cpu" {
				return hostCPU{}, errHostStat
			}
		case n <= 10:
			x, ok := parseUint(f)
			if !ok || x > 1<<50 {
				return hostCPU{}, errHostStat
			}
			v[n-1] = x
		}
		n++
	}
	if n < 8 {
		return hostCPU{}, errHostStat
	}
	// user nice system idle iowait irq softirq steal guest guest_nice
	busy := v[0] + v[1] + v[2] + v[5] + v[6]
	total := busy + v[3] + v[4] + v[7]
	return hostCPU{busy: busy * tickNs, total: total * tickNs}, nil
}

// listeners returns the socket inodes listening on TCP port, from /proc/net/tcp and tcp6.
func (p *procfs) listeners(port int) ([]uint64, error) {
	var inodes []uint64
	var firstErr error
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := p.fs.ReadAll(p.root + "/net/" + f)
		if err != nil {
			if firstErr == nil && !errors.Is(err, fs.ErrNotExist) {
				firstErr = err
			}
			continue
		}
		inodes = parseListeners(b, port, inodes)
	}
	if len(inodes) == 0 && firstErr != nil {
		return nil, firstErr
	}
	return inodes, nil
}

// parseListeners picks the LISTEN (0A) sockets on port from a /proc/net/tcp{,6} table.
func parseListeners(b []byte, port int, dst []uint64) []uint64 {
	lines := bytes.Split(b, []byte{'\n'})
	for _, ln := range lines[min(1, len(lines)):] {
		f := bytes.Fields(ln)
		if len(f) < 10 || string(f[3]) != "0A" {
			continue
		}
		local := f[1]
		i := bytes.LastIndexByte(local, ':')
		if i < 0 {
			continue
		}
		pt, err := strconv.ParseUint(string(local[i+1:]), 16, 16)
		if err != nil || int(pt) != port {
			continue
		}
		if ino, ok := parseUint(f[9]); ok && ino != 0 {
			dst = append(dst, ino)
		}
	}
	return dst
}

// close releases the files kept open.
func (p *procfs) close() {
	for _, f := range []sampleFile{p.lastPIDFile, p.hostStat} {
		if f != nil {
			_ = f.Close() // read-only
		}
	}
}

// socketOwner finds the process holding one of the socket inodes, by reading every
// /proc/<pid>/fd link. It costs a scan of the whole host, so callers cache the answer.
// Among several holders (a prefork server) the oldest ancestor wins.
func (p *procfs) socketOwner(inodes []uint64) (int, error) {
	if len(inodes) == 0 {
		return 0, errNoListener
	}
	want := make(map[string]bool, len(inodes))
	for _, ino := range inodes {
		want["socket:["+strconv.FormatUint(ino, 10)+"]"] = true
	}
	names, err := p.fs.ReadDirNames(p.root)
	if err != nil {
		return 0, err
	}
	var owners []int
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		fds, err := p.fs.ReadDirNames(p.path(pid, "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			l, err := p.fs.Readlink(p.path(pid, "fd", fd))
			if err == nil && want[l] {
				owners = append(owners, pid)
				break
			}
		}
	}
	if len(owners) == 0 {
		return 0, errNoListener
	}
	best := owners[0]
	for _, o := range owners {
		if o < best {
			best = o
		}
	}
	// Prefer a holder whose parent is not itself a holder.
	for _, o := range owners {
		st, err := p.stat(o)
		if err != nil {
			continue
		}
		parentHolds := false
		for _, q := range owners {
			if q == st.ppid {
				parentHolds = true
			}
		}
		if !parentHolds {
			return o, nil
		}
	}
	return best, nil
}

var errNoListener = errors.New("no process listens on the port")

// gpuNode reports whether a /proc/<pid>/fd link target is a GPU compute device: an NVIDIA
// device (/dev/nvidiaN, not nvidiactl or nvidia-uvm), AMD's /dev/kfd, or a DRM render node.
func gpuNode(target string) bool {
	if rest, ok := strings.CutPrefix(target, "/dev/nvidia"); ok {
		return rest != "" && rest[0] >= '0' && rest[0] <= '9'
	}
	return target == "/dev/kfd" || strings.HasPrefix(target, "/dev/dri/renderD")
}

// usesGPU reports whether pid holds a GPU device open.
func (p *procfs) usesGPU(pid int) (bool, error) {
	fds, err := p.fs.ReadDirNames(p.path(pid, "fd"))
	if err != nil {
		return false, err
	}
	for _, fd := range fds {
		if l, err := p.fs.Readlink(p.path(pid, "fd", fd)); err == nil && gpuNode(l) {
			return true, nil
		}
	}
	return false, nil
}

// readPIDFile reads a pid file: one decimal PID.
func readPIDFile(fsys fileSystem, name string) (int, error) {
	s, err := readString(fsys, name)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(s)
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s: %q is not a PID", name, s)
	}
	return pid, nil
}

// cgroupUsage reads usage_usec from a cgroup v2 cpu.stat, in ns.
func cgroupUsage(fsys fileSystem, dir string) (uint64, error) {
	buf := getBuf()
	defer putBuf(buf)
	name := filepath.Join(dir, "cpu.stat")
	n, err := fsys.ReadFile(name, buf[:1024])
	if err != nil {
		return 0, err
	}
	return parseCgroupUsage(buf[:n], name)
}

// cgroupUsageFile reads usage_usec from a cpu.stat kept open, in ns.
func cgroupUsageFile(f sampleFile, name string) (uint64, error) {
	buf := getBuf()
	defer putBuf(buf)
	n, err := f.ReadStart(buf[:1024])
	if err != nil {
		return 0, err
	}
	return parseCgroupUsage(buf[:n], name)
}

func parseCgroupUsage(b []byte, name string) (uint64, error) {
	for len(b) > 0 {
		ln := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			ln, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if v, ok := bytes.CutPrefix(ln, []byte("usage_usec ")); ok {
			if u, ok := parseUint(bytes.TrimSpace(v)); ok {
				return u * 1000, nil
			}
		}
	}
	return 0, fmt.Errorf("%s: no usage_usec", name)
}

// cgroupProcs lists the PIDs in a cgroup v2 directory.
func cgroupProcs(fsys fileSystem, dir string, dst []int) ([]int, error) {
	b, err := fsys.ReadAll(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return dst, err
	}
	for _, f := range bytes.Fields(b) {
		if v, err := strconv.Atoi(string(f)); err == nil {
			dst = append(dst, v)
		}
	}
	return dst, nil
}
