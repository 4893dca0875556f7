//go:build unix

package backends

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// open reports whether c is still open with nothing to read: a peek that does not wait finds no
// end of stream (the server closed it) and no stray bytes. One system call.
func open(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var buf [1]byte
	if err := rc.Read(func(fd uintptr) bool {
		_, _, rerr := unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		alive = rerr == unix.EAGAIN || rerr == unix.EWOULDBLOCK // else an end, bytes or an error
		return true
	}); err != nil {
		return false
	}
	return alive
}
