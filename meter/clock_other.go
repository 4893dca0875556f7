//go:build !linux

package meter

import "errors"

var errNotLinux = errors.New("meter: process clocks need Linux")

func processCPUClock(int) (uint64, error) { return 0, errNotLinux }

func selfCPU() (uint64, error) { return 0, errNotLinux }

func bootTicks() (uint64, error) { return 0, errNotLinux }

func pidfdOpen(int) (int, error) { return -1, errNotLinux }

func pidfdWatch(int) (int, error) { return -1, errNotLinux }

func pidParent(int) (int, error) { return 0, errNoPidInfo }

func pidfdExited(int) (bool, error) { return false, errNotLinux }

func closeFD(int) {}
