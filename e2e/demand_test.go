//go:build e2e && linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cpuDemand is the CPU time each of pid's threads has wanted, by thread id: the time it ran
// plus the time it waited on a run queue for a core (ns, the first two fields of
// /proc/pid/task/tid/schedstat). A thread ready to run counts here whether or not it got a
// core, so a generating runner shows its demand on a loaded machine, where the CPU it gets
// (its ticks) can fall to a few per second; an idle runner's threads sleep and want nothing.
func cpuDemand(pid int) (map[int]int64, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[int]int64, len(ents))
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "schedstat"))
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			return nil, fmt.Errorf("short %s/%s/schedstat: %q", dir, e.Name(), b)
		}
		ran, err1 := strconv.ParseInt(f[0], 10, 64)
		waited, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("odd %s/%s/schedstat: %q", dir, e.Name(), b)
		}
		out[tid] = ran + waited
	}
	return out, nil
}

// cpuUse is what pid's threads did over one window: the cores they wanted (ran or waited to
// run, per second of the window) and the ticks they got.
type cpuUse struct {
	wanted float64
	ticks  int64
}

func (u cpuUse) String() string {
	return fmt.Sprintf("wants %.3f CPUs, got %d ticks", u.wanted, u.ticks)
}

// cpuUseOver measures pid's threads over d. A thread born in the window counts from 0; one
// that exited in it is left out.
func cpuUseOver(t *testing.T, pid int, d time.Duration) cpuUse {
	t.Helper()
	ta, err := cpuTicks(pid)
	if err != nil {
		t.Fatal(err)
	}
	a, err := cpuDemand(pid)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	time.Sleep(d)
	b, err := cpuDemand(pid)
	if err != nil {
		t.Fatal(err)
	}
	wall := time.Since(t0)
	tb, err := cpuTicks(pid)
	if err != nil {
		t.Fatal(err)
	}
	var ns int64
	for tid, v := range b {
		ns += v - a[tid]
	}
	return cpuUse{wanted: float64(ns) / float64(wall.Nanoseconds()), ticks: tb - ta}
}
