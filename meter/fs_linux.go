package meter

import (
	"io/fs"
	"sync"

	"golang.org/x/sys/unix"
)

// On Linux, osFS reads with raw system calls. os.Open costs six calls before the first read
// (openat, two fcntl to try non-blocking mode, an epoll_ctl that procfs refuses, two fcntl to
// undo it) and io.ReadFull a second read to see EOF: nine calls per file where three do. A
// procfs or sysfs file, like a regular one, gives everything up to len(buf) in one read.

func (osFS) ReadFile(name string, buf []byte) (int, error) {
	fd, err := openNoEINTR(name, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	n, err := readNoEINTR(fd, buf)
	_ = unix.Close(fd) // read-only: a failed close loses nothing
	if err != nil {
		return 0, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	return n, nil
}

func (osFS) ReadDirNames(name string) ([]string, error) {
	fd, err := openNoEINTR(name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer func() { _ = unix.Close(fd) }() // read-only: a failed close loses nothing
	buf := getBuf()
	defer putBuf(buf)
	var names []string
	for {
		n, err := unix.Getdents(fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return names, &fs.PathError{Op: "readdirent", Path: name, Err: err}
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names) // skips . and ..
	}
}

func (osFS) Open(name string) (sampleFile, error) {
	fd, err := openNoEINTR(name, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return &rawFile{fd: fd, name: name}, nil
}

// rawFile is a sampleFile over a raw descriptor. The lock keeps Close from releasing the
// descriptor, whose number the kernel would hand out again, while a read is using it.
type rawFile struct {
	mu   sync.RWMutex
	fd   int // -1 once closed
	name string
}

func (f *rawFile) ReadStart(buf []byte) (int, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.fd < 0 {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: fs.ErrClosed}
	}
	for {
		n, err := unix.Pread(f.fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, &fs.PathError{Op: "read", Path: f.name, Err: err}
		}
		return n, nil
	}
}

func (f *rawFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fd < 0 {
		return nil
	}
	err := unix.Close(f.fd)
	f.fd = -1
	return err
}

// readStartRaw is f.ReadStart(buf) when f is a rawFile, called on the type rather than through
// the interface, so that a caller's buffer can stay on its stack; ok is false for another file.
func readStartRaw(f sampleFile, buf []byte) (n int, ok bool, err error) {
	rf, ok := f.(*rawFile)
	if !ok {
		return 0, false, nil
	}
	n, err = rf.ReadStart(buf)
	return n, true, err
}

func openNoEINTR(name string, flags int) (int, error) {
	for {
		fd, err := unix.Open(name, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func readNoEINTR(fd int, buf []byte) (int, error) {
	for {
		n, err := unix.Read(fd, buf)
		if err != unix.EINTR {
			return n, err
		}
	}
}
