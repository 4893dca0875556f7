package meter

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// unpack writes a txtar-style fixture under dir: "-- name --" starts a file, "-- name -> target
// --" makes a symbolic link, and text before the first marker is a comment. Fixtures are kept
// as archives, like procfs's fixtures.ttar, because sysfs names hold colons (intel-rapl:0),
// which Go module zips refuse, and /proc holds symbolic links.
func unpack(t testing.TB, archive, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", archive))
	if err != nil {
		t.Fatal(err)
	}
	var name string
	var body strings.Builder
	flush := func() {
		if name == "" {
			return
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		name = ""
		body.Reset()
	}
	for _, ln := range strings.SplitAfter(string(b), "\n") {
		trim := strings.TrimRight(ln, "\n")
		if strings.HasPrefix(trim, "-- ") && strings.HasSuffix(trim, " --") {
			flush()
			hdr := strings.TrimSuffix(strings.TrimPrefix(trim, "-- "), " --")
			if link, target, ok := strings.Cut(hdr, " -> "); ok {
				p := filepath.Join(dir, link)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, p); err != nil {
					t.Fatal(err)
				}
				continue
			}
			name = hdr
			continue
		}
		if name != "" {
			body.WriteString(ln)
		}
	}
	flush()
	return dir
}

// sysFixture unpacks a sysfs archive as <tmp>/class/powercap and returns the sysfs root.
func sysFixture(t testing.TB, archive string) string {
	root := t.TempDir()
	unpack(t, archive, filepath.Join(root, "class", "powercap"))
	return root
}

// refusingFS refuses reads of files whose path ends with one of suffixes, as the kernel refuses
// energy_uj to a non-root user since Linux 5.10; tests run as root, so the refusal is injected.
// It counts the refusals.
type refusingFS struct {
	osFS
	suffixes []string
	refused  atomic.Int64
}

func (r *refusingFS) ReadFile(name string, buf []byte) (int, error) {
	for _, s := range r.suffixes {
		if strings.HasSuffix(name, s) {
			r.refused.Add(1)
			return 0, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
		}
	}
	return r.osFS.ReadFile(name, buf)
}

func (r *refusingFS) Open(name string) (sampleFile, error) {
	for _, s := range r.suffixes {
		if strings.HasSuffix(name, s) {
			r.refused.Add(1)
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
		}
	}
	return r.osFS.Open(name)
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func writeFile(t testing.TB, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// closeOK closes c and fails the test when that fails: a Meter's Close releases NVML, whose
// shutdown error is real.
func closeOK(t testing.TB, c interface{ Close() error }) {
	t.Helper()
	if err := c.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

// fixtureClocks holds the fake clock (RAPL's) of each fixture meter, which cpuWork moves.
var fixtureClocks sync.Map // *Meter → *fakeClock

// cpuWork makes the fixture host do sec seconds of the backend tree's CPU work costing joules:
// thread 100 of PID 100 runs sec longer, the host's busy time (/proc/stat) moves by as much, and
// RAPL's package-0 counts joules more. The three move together, as on a host where the tree is
// the only user, so the figure can be measured.
func cpuWork(t testing.TB, m *Meter, sec, joules float64) {
	t.Helper()
	cpuBurst(t, m, sec, sec, joules)
}

// cpuBurst is cpuWork where the tree's CPU time (cpuSec) is not the wall time (wallSec).
func cpuBurst(t testing.TB, m *Meter, wallSec, sec, joules float64) {
	t.Helper()
	bump := func(p string, field int, by uint64) {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(string(b), "\n", 2)
		f := strings.Fields(lines[0])
		v, err := strconv.ParseUint(f[field], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		f[field] = strconv.FormatUint(v+by, 10)
		lines[0] = strings.Join(f, " ")
		writeFile(t, p, strings.Join(lines, "\n"))
	}
	if clk, ok := fixtureClocks.Load(m); ok {
		clk.(*fakeClock).Advance(time.Duration(wallSec * float64(time.Second)))
	}
	bump(filepath.Join(m.opts.ProcRoot, "100", "task", "100", "schedstat"), 0, uint64(sec*1e9))
	bump(filepath.Join(m.opts.ProcRoot, "stat"), 1, uint64(sec*userHZ))
	bump(filepath.Join(m.opts.SysfsRoot, "class", "powercap", "intel-rapl:0", "energy_uj"), 0, uint64(joules*1e6))
}

func (r *refusingFS) ReadDirNames(name string) ([]string, error) {
	for _, s := range r.suffixes {
		if strings.HasSuffix(name, s) {
			r.refused.Add(1)
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
		}
	}
	return r.osFS.ReadDirNames(name)
}
