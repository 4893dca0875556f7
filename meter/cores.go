package meter

import (
	"bytes"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// coresCache keeps a backend's treeCores for the tree's last set of PIDs: a tree that did not
// change reads nothing again.
type coresCache struct {
	mu    sync.Mutex
	buf   []int
	pids  []int
	cores float64
	ok    bool
}

// coresOf is how many cores the tree whose processes are those of a and b may run on
// (treeCores), read again only when the set of PIDs changed.
func (m *Meter) coresOf(bs *backendState, a, b []procSample) float64 {
	c := &bs.coresC
	c.mu.Lock()
	defer c.mu.Unlock()
	key := c.buf[:0]
	for _, ps := range [2][]procSample{a, b} {
		for _, p := range ps {
			key = append(key, p.pid)
		}
	}
	slices.Sort(key)
	key = slices.Compact(key)
	c.buf = key
	if c.ok && slices.Equal(c.pids, key) {
		return c.cores
	}
	c.pids, c.ok = slices.Clone(key), true
	c.cores = m.treeCores(bs, c.pids)
	return c.cores
}

// treeCores is how many cores a backend's tree (its processes pids) may run on at most, for the
// cap on its CPU time over a span: the host's online CPUs (runtime.NumCPU when they cannot be
// read), no more than the CPUs the tree's processes may run on together (the union of their
// Cpus_allowed_list; the host's when one cannot be read), no more than the CPU quotas of the
// cgroups they are in (cpu.max of each and its ancestors; summed over their distinct cgroups;
// none when one has no quota or cannot be read), and no more than the backend's own cgroup's
// quota when it is metered by one. The tree's own limits, not the proxy's: a proxy pinned to
// fewer cores, or in a tighter cgroup, says nothing of its backend.
func (m *Meter) treeCores(b *backendState, pids []int) float64 {
	host := m.onlineCPUs()
	cores := host
	if len(pids) > 0 {
		var allowed []int
		affinity := true
		quota := 0.0
		var groups []string
		for _, pid := range pids {
			dir := filepath.Join(m.opts.ProcRoot, strconv.Itoa(pid))
			if cpus, ok := m.allowedCPUs(dir); ok && affinity {
				allowed = append(allowed, cpus...)
			} else {
				affinity = false
			}
			cg := m.procCgroup(dir)
			if cg == "" {
				quota = math.Inf(1)
				continue
			}
			if !slices.Contains(groups, cg) {
				groups = append(groups, cg)
				quota += m.quotaUp(cg)
			}
		}
		if affinity {
			slices.Sort(allowed)
			cores = min(cores, float64(len(slices.Compact(allowed))))
		}
		cores = min(cores, quota)
	}
	if b != nil && b.cgroup != "" {
		if q, ok := cgroupQuota(m.fs, b.cgroup); ok {
			cores = min(cores, q)
		}
	}
	return cores
}

// onlineCPUs is the host's online CPUs (SysfsRoot/devices/system/cpu/online), else runtime.NumCPU.
func (m *Meter) onlineCPUs() float64 {
	b, err := m.fs.ReadAll(filepath.Join(m.opts.SysfsRoot, "devices", "system", "cpu", "online"))
	if err == nil {
		if cpus, ok := parseCPUList(string(bytes.TrimSpace(b))); ok && len(cpus) > 0 {
			return float64(len(cpus))
		}
	}
	return float64(runtime.NumCPU())
}

// allowedCPUs reads a process's Cpus_allowed_list from its /proc directory.
func (m *Meter) allowedCPUs(dir string) ([]int, bool) {
	b, err := m.fs.ReadAll(filepath.Join(dir, "status"))
	if err != nil {
		return nil, false
	}
	for ln := range bytes.SplitSeq(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(ln, []byte("Cpus_allowed_list:")); ok {
			return parseCPUList(string(bytes.TrimSpace(v)))
		}
	}
	return nil, false
}

// parseCPUList parses a CPU list ("0-3,8,10-11").
func parseCPUList(s string) ([]int, bool) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, rng := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, false
		}
		z := a
		if rng {
			if z, err = strconv.Atoi(hi); err != nil || z < a || z-a > 1<<16 {
				return nil, false
			}
		}
		for c := a; c <= z; c++ {
			out = append(out, c)
		}
	}
	return out, len(out) > 0
}

// procCgroup is a process's cgroup v2 directory under SysfsRoot, from its /proc directory's
// cgroup file ("" when unknown).
func (m *Meter) procCgroup(dir string) string {
	b, err := m.fs.ReadAll(filepath.Join(dir, "cgroup"))
	if err != nil {
		return ""
	}
	for ln := range bytes.SplitSeq(b, []byte("\n")) {
		if p, ok := bytes.CutPrefix(ln, []byte("0::")); ok {
			return filepath.Join(m.opts.SysfsRoot, "fs", "cgroup", filepath.Clean("/"+string(bytes.TrimSpace(p))))
		}
	}
	return ""
}

// quotaUp is the tightest CPU quota of a cgroup and its ancestors up to the hierarchy's root
// (+Inf when none has one).
func (m *Meter) quotaUp(dir string) float64 {
	root := filepath.Join(m.opts.SysfsRoot, "fs", "cgroup")
	q := math.Inf(1)
	for d := dir; strings.HasPrefix(d, root); d = filepath.Dir(d) {
		if v, ok := cgroupQuota(m.fs, d); ok {
			q = min(q, v)
		}
		if d == root {
			break
		}
	}
	return q
}

// cgroupQuota reads a cgroup v2 cpu.max ("max 100000", or "150000 100000": 1.5 cores).
func cgroupQuota(fsys fileSystem, dir string) (float64, bool) {
	if dir == "" {
		return 0, false
	}
	b, err := fsys.ReadAll(filepath.Join(dir, "cpu.max"))
	if err != nil {
		return 0, false
	}
	f := bytes.Fields(b)
	if len(f) != 2 {
		return 0, false
	}
	quota, err1 := strconv.ParseFloat(string(f[0]), 64)
	period, err2 := strconv.ParseFloat(string(f[1]), 64)
	if err1 != nil || err2 != nil || quota <= 0 || period <= 0 {
		return 0, false // "max": no quota
	}
	return quota / period, true
}
