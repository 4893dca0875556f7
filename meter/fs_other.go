//go:build !linux

package meter

import (
	"errors"
	"io"
	"os"
)

func (osFS) ReadFile(name string, buf []byte) (int, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	n, err := io.ReadFull(f, buf)
	_ = f.Close() // read-only: a failed close loses nothing
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

func (osFS) ReadDirNames(name string) ([]string, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only
	return f.Readdirnames(-1)
}

func (osFS) Open(name string) (sampleFile, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return osSampleFile{f}, nil
}

// osSampleFile reads a kept-open file from its start with ReadAt.
type osSampleFile struct{ f *os.File }

func (s osSampleFile) ReadStart(buf []byte) (int, error) {
	n, err := s.f.ReadAt(buf, 0)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

func (s osSampleFile) Close() error { return s.f.Close() }

// readStartRaw reads nothing off Linux: no file is a rawFile (see fs_linux.go).
func readStartRaw(sampleFile, []byte) (n int, ok bool, err error) { return 0, false, nil }
