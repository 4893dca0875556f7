package meter

import (
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
)

// fileSystem is how the meter reads sysfs, procfs and pid files. The real one is osFS; tests
// wrap it to refuse reads as an unprivileged user would see them (tests run as root), or to
// count them.
type fileSystem interface {
	// ReadFile reads the start of a file into buf and returns how many bytes it read.
	ReadFile(name string, buf []byte) (int, error)
	// ReadAll reads a whole file.
	ReadAll(name string) ([]byte, error)
	// ReadDirNames lists a directory's entries, unsorted.
	ReadDirNames(name string) ([]string, error)
	// Readlink returns a symbolic link's target.
	Readlink(name string) (string, error)
	// Open opens a file to be read again and again from its start (see sampleFile).
	Open(name string) (sampleFile, error)
}

// sampleFile is a counter file kept open and read again from its start at every sample: one
// pread instead of an open, a read and a close (nine system calls through os.Open on Linux), as
// top(1) keeps /proc/stat and /proc/loadavg open. procfs and sysfs files are seq_file and kernfs
// files, which render afresh on every read at offset 0. It is safe for concurrent use; a read
// after Close fails with fs.ErrClosed.
type sampleFile interface {
	// ReadStart reads the file from offset 0 into buf in one read and returns the byte count.
	ReadStart(buf []byte) (int, error)
	Close() error
}

// osFS reads the real files: on Linux with one open, one read and one close per file.
type osFS struct{}

var _ fileSystem = osFS{}

func (osFS) ReadAll(name string) ([]byte, error) { return os.ReadFile(name) }

func (osFS) Readlink(name string) (string, error) { return os.Readlink(name) }

// bufPool holds read buffers: a buffer handed to fileSystem.ReadFile escapes to the heap, and
// a span reads a few dozen files.
var bufPool = sync.Pool{New: func() any { return new([4096]byte) }}

func getBuf() *[4096]byte  { return bufPool.Get().(*[4096]byte) }
func putBuf(b *[4096]byte) { bufPool.Put(b) }

// readUint reads a file holding one unsigned decimal number, as sysfs attributes do.
func readUint(fsys fileSystem, name string) (uint64, error) {
	buf := getBuf()
	defer putBuf(buf)
	n, err := fsys.ReadFile(name, buf[:32])
	if err != nil {
		return 0, err
	}
	return parseUintFile(buf[:n], name)
}

// sampleUint reads a kept-open file holding one unsigned decimal number; name is for errors.
func sampleUint(f sampleFile, name string) (uint64, error) {
	buf := getBuf()
	defer putBuf(buf)
	n, err := f.ReadStart(buf[:32])
	if err != nil {
		return 0, err
	}
	return parseUintFile(buf[:n], name)
}

func parseUintFile(b []byte, name string) (uint64, error) {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	v, ok := parseUint(b)
	if !ok {
		return 0, &fs.PathError{Op: "parse", Path: name, Err: strconv.ErrSyntax}
	}
	return v, nil
}

// readString reads a short file, trimmed.
func readString(fsys fileSystem, name string) (string, error) {
	buf := getBuf()
	defer putBuf(buf)
	n, err := fsys.ReadFile(name, buf[:256])
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// parseUint parses decimal digits without allocating.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (^uint64(0)-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}
