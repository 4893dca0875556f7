package meter

import (
	"errors"
	"io/fs"
	"time"

	"golang.org/x/sys/unix"
)

// processCPUClock reads another process's CPU clock: clock id ((^pid)<<3)|CPUCLOCK_SCHED, the
// clockid_t that clock_getcpuclockid(3) returns. It sums every thread, exited ones included, in
// ns, at the cost of one system call.
func processCPUClock(pid int) (uint64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(int32((^pid)<<3|2), &ts); err != nil {
		return 0, err
	}
	return uint64(ts.Nano()), nil
}

// selfCPU is this process's CPU time in ns.
func selfCPU() (uint64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return 0, err
	}
	return uint64(ts.Nano()), nil
}

// bootTicks is the time since boot in USER_HZ ticks, the unit of a process's starttime.
func bootTicks() (uint64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0, err
	}
	return uint64(ts.Nano()) / uint64(time.Second/userHZ), nil
}

// pidfdOpen opens a pidfd for pid (Linux 5.3): a handle that never refers to another process,
// even once pid is reused.
func pidfdOpen(pid int) (int, error) { return unix.PidfdOpen(pid, 0) }

// pidParent is the PID of pid's parent, as /proc/<pid>/stat shows it (for a thread, its
// process's parent), asked of a pidfd that may name a thread (PIDFD_THREAD, Linux 6.9) with
// PIDFD_GET_INFO (Linux 6.13): three system calls that render nothing, where opening, reading
// and closing the stat file takes about three times as long. fs.ErrNotExist when no task has
// the PID (gone, or not yet born); errNoPidInfo where the kernel cannot answer this way.
func pidParent(pid int) (int, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_THREAD)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return 0, fs.ErrNotExist
		}
		return 0, errNoPidInfo
	}
	defer closeFD(fd)
	info := unix.PidfdInfo{Mask: unix.PIDFD_INFO_PID}
	if err := unix.IoctlPidfdInfo(fd, &info); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return 0, fs.ErrNotExist // it exited since the open
		}
		return 0, errNoPidInfo
	}
	if info.Mask&unix.PIDFD_INFO_PID == 0 || int(info.Pid) != pid {
		return 0, errNoPidInfo
	}
	return int(info.Ppid), nil
}

// pidfdWatch puts a pidfd in an epoll set of its own and returns the set. The kernel marks the
// set ready when the process exits, so each check (pidfdExited) is one epoll_wait that reads
// that mark, where a ppoll would poll the pidfd afresh and queue and dequeue a waiter each time.
func pidfdWatch(pidfd int) (int, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return -1, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(pidfd)}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, pidfd, &ev); err != nil {
		closeFD(ep)
		return -1, err
	}
	return ep, nil
}

// pidfdExited reports whether the process behind the pidfd that ep watches (pidfdWatch) has
// exited, zombie or reaped: the pidfd is readable then, and stays so. One epoll_wait, with no
// wait.
func pidfdExited(ep int) (bool, error) {
	var ev [1]unix.EpollEvent
	for {
		n, err := unix.EpollWait(ep, ev[:], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, err
		}
		return n > 0, nil
	}
}

// closeFD closes a pidfd, an epoll set or a read-only descriptor: a failed close loses nothing.
func closeFD(fd int) { _ = unix.Close(fd) }
