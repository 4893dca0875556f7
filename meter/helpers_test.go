package meter

import (
	"io/fs"
	"os"
	"path/filepath"
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
