package meter

import (
	"errors"
	"io/fs"
	"slices"
	"time"
)

// sampleTree reads the CPU time of the backend's processes: per process, or the cgroup's total.
// atEnd is set at a span's end (see tree).
func (m *Meter) sampleTree(b *backendState, dst []procSample, atEnd bool) ([]procSample, uint64, error) {
	if b.cgroup != "" {
		cg, err := b.cgroupUsage(m.fs)
		if err != nil {
			return dst, 0, err
		}
		if m.gpu != nil || m.hostGPU {
			// Only the GPU attribution needs the cgroup's processes.
			pids, err := cgroupProcs(m.fs, b.cgroup, nil)
			if err != nil {
				return dst, 0, err
			}
			for _, pid := range pids {
				dst = append(dst, procSample{pid: pid})
			}
		}
		return dst, cg, nil
	}
	pids, err := m.tree(b, atEnd)
	if err != nil {
		return dst, 0, err
	}
	gone := false
	for _, pid := range pids {
		ns, err := m.proc.cpuNs(pid)
		if err != nil {
			gone = true
			continue // it exited after the listing; treeDelta sees it vanish
		}
		dst = append(dst, procSample{pid: pid, cpu: ns})
	}
	if gone {
		b.forgetTree(pids) // walk again next time rather than read the dead PID again
	}
	return dst, 0, nil
}

// tree returns the backend's root process and its descendants, root first. It reuses the last
// walk while that is known complete: no PID has been handed out on the host since the walk
// began (the last PID, procfs.lastPID, stands still), or the few handed out went to processes
// or threads outside the tree (newPIDsOutside), so no process can have joined the tree and no
// PID in it can have been reused; processes that left fail their CPU read. Otherwise it walks
// again. At a span's end it also checks that the root is still alive (one epoll_wait on a watch
// of its pidfd).
// Begin trusts a tree known complete less than treeTTL ago without reading anything. The slice
// is shared: read-only.
func (m *Meter) tree(b *backendState, atEnd bool) ([]int, error) {
	b.mu.Lock()
	if err := b.noProcessLocked(); err != nil {
		b.mu.Unlock()
		return nil, err
	}
	if !atEnd && b.tree != nil && b.treeRoot == b.pid && time.Since(b.treeSeen) < treeTTL {
		t := b.tree
		b.mu.Unlock()
		return t, nil
	}
	known := b.tree != nil && b.treeRoot == b.pid && b.treeCurOK
	t, from, unborn := b.tree, b.treeCur, b.treeUnborn
	b.mu.Unlock()

	cur, curOK := m.proc.lastPID()
	upTo := cur // where the cursor goes when the tree is kept
	switch {
	case !known:
	case !curOK:
		known = false
	case cur != from:
		known, upTo = m.newPIDsOutside(t, from, cur, unborn)
	}
	b.mu.Lock()
	if known && sameTree(b.tree, t) && b.treeRoot == b.pid && b.treeCur == from {
		if !atEnd || b.aliveLocked(m.proc) {
			b.treeCur, b.treeUnborn = upTo, 0
			if upTo != cur {
				b.treeUnborn = upTo + 1
			}
			b.treeSeen = time.Now()
			b.mu.Unlock()
			return t, nil
		}
		b.dropLocked()
	}
	b.mu.Unlock()
	// Walk. The last PID was read before the walk began, so a process created during it moves
	// the last PID past cur and is walked for next time.
	root, pids, err := m.walk(b, nil)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	if b.pid == root {
		b.tree, b.treeRoot, b.treeCur, b.treeCurOK, b.treeSeen = pids, root, cur, curOK, time.Now()
		b.treeUnborn = 0
		b.gpuHolders = b.gpuHolders[:0]
		b.walks++
	}
	b.mu.Unlock()
	return pids, nil
}

// maxNewPIDs bounds the PIDs newPIDsOutside looks at before a walk is cheaper. It asks each PID's
// parent (procfs.parentOf: a pidfd's answer, or /proc/<pid>/stat where the kernel cannot give
// one; BenchmarkRead/process-parent and process-stat), where a walk reads each tree process's
// task directory and every thread's children file (BenchmarkRead/children, and
// BenchmarkBeginEnd/local-live-proc-no-rapl-walk for a two-process tree; more for Ollama and
// its runner).
const maxNewPIDs = 4

// newPIDsOutside reports whether each PID handed out after from, up to cur, is known to be
// outside tree: gone (no /proc/<pid>), or a process or thread that is not a tree PID reused
// and whose parent is not in tree. A PID's parent is created before it, and PIDs rise until
// they wrap, so a process joining the tree has its parent in tree or among the PIDs looked at
// before it, which made this false already. A new thread of a tree process other than the root
// shows its process's parent, in tree, and costs a walk that finds nothing new. A wrap (cur
// below from), more than maxNewPIDs PIDs, or a stat that cannot be read for another reason,
// reports false: walk.
//
// A PID with no /proc entry may also not be born yet: the kernel hands out the PID (and shows it
// as the last PID) a moment before the process can be seen. So the first such PID, unless it is
// unborn (already found so by the last check), stops upTo, the PID the tree is known settled
// to: the next check looks at it again, and a child of the tree born since is walked then.
// Otherwise upTo is cur.
func (m *Meter) newPIDsOutside(tree []int, from, cur, unborn uint64) (outside bool, upTo uint64) {
	if cur-from > maxNewPIDs { // a wrap makes the difference huge
		return false, cur
	}
	upTo = cur
	for id := from + 1; id <= cur; id++ {
		pid := int(id)
		ppid, err := m.proc.parentOf(pid)
		if errors.Is(err, fs.ErrNotExist) {
			if id != unborn && upTo == cur {
				upTo = id - 1 // gone, or not yet born: looked at again next time
			}
			continue // in no tree a walk could find now
		}
		if err != nil || slices.Contains(tree, pid) || slices.Contains(tree, ppid) {
			return false, cur
		}
	}
	return true, upTo
}

// sameTree reports whether a and b are the same stored walk.
func sameTree(a, b []int) bool {
	return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0]
}

// treePIDs lists the backend's processes afresh: the cgroup's, or the root process and its
// descendants.
func (m *Meter) treePIDs(b *backendState, dst []int) ([]int, error) {
	if b.cgroup != "" {
		return cgroupProcs(m.fs, b.cgroup, dst)
	}
	_, pids, err := m.walk(b, dst)
	return pids, err
}

// walk finds the root process and lists it and its descendants.
func (m *Meter) walk(b *backendState, dst []int) (root int, pids []int, err error) {
	root, err = b.rootPID(m.proc, m.fs)
	if err != nil {
		return 0, dst, err
	}
	return root, m.proc.tree(root, dst), nil
}

// spanStart tells treeDelta whether a process started within a span: its start time, in clock
// ticks after boot, is not before the span's start. It reads the boot clock once, and only when
// a process appeared, so a span whose tree did not change pays nothing for it.
type spanStart struct {
	m     *Meter
	start time.Time
	read  bool
	ticks uint64
	err   error
}

func (c *spanStart) started(pid int) bool {
	if !c.read {
		c.read = true
		var now uint64
		now, c.err = c.m.bootTicks()
		// The span began this many whole ticks ago (rounded down: a process born in the span's
		// first tick counts).
		back := uint64(time.Since(c.start) / (time.Second / userHZ))
		c.ticks = now - min(now, back)
	}
	st, err := c.m.proc.stat(pid)
	return c.err == nil && err == nil && st.starttime+1 >= c.ticks
}

// treeDelta is the CPU time the tree spent between two samples. A process present at both ends
// adds its difference; a process that appeared adds all its time if it started within the span
// (started(pid)); a process that vanished, or appeared older than the span, makes the count
// short, since its time inside the span is unknown.
func treeDelta(a, b []procSample, started func(pid int) bool) (ns uint64, short bool) {
	for _, e := range b {
		found := false
		for _, x := range a {
			if x.pid == e.pid {
				found = true
				if e.cpu >= x.cpu {
					ns += e.cpu - x.cpu
				} else {
					short = true // the PID was reused
				}
				break
			}
		}
		if !found {
			if started(e.pid) {
				ns += e.cpu
			} else {
				short = true
			}
		}
	}
	for _, x := range a {
		found := false
		for _, e := range b {
			if e.pid == x.pid {
				found = true
				break
			}
		}
		if !found {
			short = true
		}
	}
	return ns, short
}
