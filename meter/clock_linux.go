package meter

import (
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

// pidfdExited reports whether the process behind a pidfd has exited, zombie or reaped: the
// pidfd polls readable then. One ppoll, with no wait.
func pidfdExited(fd int) (bool, error) {
	fds := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	var ts unix.Timespec
	n, err := unix.Ppoll(fds[:], &ts, nil)
	if err != nil {
		return false, err
	}
	return n > 0, nil
}

// closeFD closes a pidfd or a read-only descriptor: a failed close loses nothing.
func closeFD(fd int) { _ = unix.Close(fd) }
