//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package ledger

import (
	"errors"
	"os"
	"syscall"
)

// lockFile takes an exclusive advisory lock on f, so that two processes cannot append to one
// chain. Closing f releases it.
func lockFile(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) //nolint:gosec // a file descriptor fits an int
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return ErrLocked
	}
	return err
}
