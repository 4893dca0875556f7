package meter

import (
	"bytes"
	"path/filepath"
	"runtime"
	"strconv"
)

// treeCores is how many cores a backend's tree may run on at most, for the cap on its CPU time
// over a span: the cores this process may run on (runtime.NumCPU: its affinity at start), no
// more than its cgroup's CPU quota when one is set, and no more than the backend's own cgroup's
// quota when it is metered by one. The backend shares the proxy's host, so the proxy's affinity
// and quota, where they are narrower than the host's, are usually the container's both run in;
// they are only ever an upper bound for the cap.
func (m *Meter) treeCores(b *backendState) float64 {
	cores := float64(runtime.NumCPU())
	if q, ok := cgroupQuota(m.fs, m.ownCgroup()); ok {
		cores = min(cores, q)
	}
	if b != nil && b.cgroup != "" {
		if q, ok := cgroupQuota(m.fs, b.cgroup); ok {
			cores = min(cores, q)
		}
	}
	return cores
}

// ownCgroup is this process's cgroup v2 directory under SysfsRoot ("" when unknown).
func (m *Meter) ownCgroup() string {
	b, err := m.fs.ReadAll(filepath.Join(m.opts.ProcRoot, "self", "cgroup"))
	if err != nil {
		return ""
	}
	for ln := range bytes.SplitSeq(b, []byte("\n")) {
		if p, ok := bytes.CutPrefix(ln, []byte("0::")); ok {
			return filepath.Join(m.opts.SysfsRoot, "fs", "cgroup", string(bytes.TrimSpace(p)))
		}
	}
	return ""
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
