package meter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// The byte layouts of the macOS structures the Apple Silicon meter reads. Decoding is pure Go
// so that it is tested on every OS; apple_darwin.go only fills the buffers.

// rusage_info_v6 (<sys/resource.h>, macOS 14+), as filled by proc_pid_rusage(pid,
// RUSAGE_INFO_V6, buf): little-endian, a 16-byte UUID then uint64 fields.
const (
	rusageInfoV6     = 6
	rusageV6Size     = 464
	riUserTimeOff    = 16  // ri_user_time, mach absolute time units
	riSystemTimeOff  = 24  // ri_system_time, mach absolute time units
	riEnergyNJOff    = 336 // ri_energy_nj: the process's CPU energy, nJ
	procPIDThreadCnt = 34  // PROC_PIDTHREADCOUNTS, a proc_pidinfo flavor
)

// struct proc_threadcounts as PROC_PIDTHREADCOUNTS fills it: an 8-byte header, then one
// proc_threadcounts_data of five uint64 per performance level (instructions, cycles, user and
// system time, energy in nJ). Only the layout seen on Apple Silicon is read: 88 bytes, two
// performance levels. Any other size is refused rather than guessed at.
const (
	threadCountsSize   = 88
	threadCountsHeader = 8
	threadCountsLevel  = 40
	threadCountsLevels = 2
	ptcdEnergyNJOff    = 32
)

// errLayout says a kernel structure came back in a layout this meter does not know.
var errLayout = errors.New("meter: unknown structure layout")

// rusageV6 is what the meter takes from one rusage_info_v6.
type rusageV6 struct {
	energyNJ uint64
	cpuMach  uint64 // user + system time, mach absolute time units
}

// decodeRusageV6 decodes a rusage_info_v6 of exactly rusageV6Size bytes.
func decodeRusageV6(b []byte) (rusageV6, error) {
	if len(b) != rusageV6Size {
		return rusageV6{}, fmt.Errorf("%w: rusage_info_v6 of %d bytes, want %d", errLayout, len(b), rusageV6Size)
	}
	le := binary.LittleEndian
	return rusageV6{
		energyNJ: le.Uint64(b[riEnergyNJOff:]),
		cpuMach:  le.Uint64(b[riUserTimeOff:]) + le.Uint64(b[riSystemTimeOff:]),
	}, nil
}

// decodeThreadCounts returns a thread's CPU energy in nJ, summed over its performance levels,
// from a proc_threadcounts of n bytes as proc_pidinfo returned it.
func decodeThreadCounts(b []byte, n int) (uint64, error) {
	if n != threadCountsSize || len(b) < threadCountsSize {
		return 0, fmt.Errorf("%w: proc_threadcounts of %d bytes, want %d (%d performance levels)",
			errLayout, n, threadCountsSize, threadCountsLevels)
	}
	var nj uint64
	for l := range threadCountsLevels {
		nj += binary.LittleEndian.Uint64(b[threadCountsHeader+l*threadCountsLevel+ptcdEnergyNJOff:])
	}
	return nj, nil
}

// machToNs converts mach absolute time units to ns with the host's timebase (numer/denom:
// 125/3 on Apple Silicon, 1/1 on Intel).
func machToNs(t uint64, numer, denom uint32) uint64 {
	if denom == 0 {
		return 0
	}
	hi, lo := bits.Mul64(t, uint64(numer))
	if hi >= uint64(denom) {
		return math.MaxUint64
	}
	q, _ := bits.Div64(hi, lo, uint64(denom))
	return q
}

// parseClientCreator reads the PID from an IOAccelerator user client's IOUserClientCreator,
// "pid 1234, ollama".
func parseClientCreator(s string) (int, bool) {
	rest, ok := strings.CutPrefix(s, "pid ")
	if !ok {
		return 0, false
	}
	num, _, _ := strings.Cut(rest, ",")
	pid, err := strconv.Atoi(strings.TrimSpace(num))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}
