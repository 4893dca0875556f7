package meter

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// ErrCounterWrap says a RAPL counter went unread long enough to have wrapped more than once,
// or jumped by more than its zone could draw: the reading cannot be trusted.
var ErrCounterWrap = errors.New("meter: counter may have wrapped more than once")

// raplZone is one powercap zone whose energy_uj the meter reads.
type raplZone struct {
	dir      string // sysfs directory, e.g. .../intel-rapl:0
	name     string // package-0, dram, psys
	maxRange uint64 // max_energy_range_uj: energy_uj wraps to 0 past it
	window   time.Duration
	energy   string     // the energy_uj path
	f        sampleFile // energy_uj kept open; nil: read afresh each time

	// Guarded by rapl.mu: the last raw value, when it was read, and the wrap-extended total.
	last   uint64
	lastAt time.Time
	total  uint64
}

// rapl reads Linux RAPL energy counters through powercap sysfs and extends them past their
// wraparound. It sums the zones that do not overlap: psys alone when present (it covers the
// packages and DRAM), otherwise every package plus every DRAM zone; never core or uncore, which
// sit inside a package. It is safe for concurrent use.
type rapl struct {
	fs       fileSystem
	now      func() time.Time
	maxWatts float64
	zones    []*raplZone
	fallback []*raplZone // the packages and DRAM when zones is psys, in case psys is frozen

	mu    sync.Mutex
	epoch uint64 // bumped whenever a zone's reading could hide a second wrap
}

// raplReading is the extended energy of all zones at one instant, in µJ.
type raplReading struct {
	uj    uint64
	epoch uint64
	at    time.Time
}

// detectRAPL finds the zones under <sysfsRoot>/class/powercap and reads each once. It returns
// an error wrapping ErrNoData when there is no powercap or no RAPL zone, and one wrapping
// fs.ErrPermission when energy_uj is root-only (Linux ≥ 5.10, CVE-2020-8694).
func detectRAPL(fsys fileSystem, sysfsRoot string, now func() time.Time, maxWatts float64) (*rapl, error) {
	if maxWatts <= 0 {
		maxWatts = raplMaxWatts
	}
	base := filepath.Join(sysfsRoot, "class", "powercap")
	names, err := fsys.ReadDirNames(base)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: no powercap at %s", ErrNoData, base)
		}
		return nil, fmt.Errorf("listing %s: %w", base, err)
	}
	sort.Strings(names)
	var psys, pkgs, drams []*raplZone
	for _, n := range names {
		if !isRAPLZoneName(n) {
			continue
		}
		dir := filepath.Join(base, n)
		zn, err := readString(fsys, filepath.Join(dir, "name"))
		if err != nil {
			continue // a zone without a name is not one we can place
		}
		z := &raplZone{dir: dir, name: zn}
		switch {
		case zn == "psys":
			psys = append(psys, z)
		case strings.HasPrefix(zn, "package"):
			pkgs = append(pkgs, z)
		case zn == "dram":
			drams = append(drams, z)
		}
		// core, uncore and anything else lie inside a package: never added.
	}
	r := &rapl{fs: fsys, now: now, maxWatts: maxWatts, zones: psys}
	if len(r.zones) == 0 {
		r.zones = append(pkgs, drams...)
	} else {
		r.fallback = append(pkgs, drams...)
	}
	if len(r.zones) == 0 {
		return nil, fmt.Errorf("%w: no RAPL zone under %s", ErrNoData, base)
	}
	if err := r.initZones(r.zones); err != nil {
		return nil, err
	}
	return r, nil
}

// useFallback replaces a psys zone that failed its liveness probe by the packages and DRAM,
// which psys covers. It fails when there are none, or they cannot be read.
func (r *rapl) useFallback() error {
	if len(r.fallback) == 0 {
		return errors.New("rapl: no package or DRAM zone beside psys")
	}
	if err := r.initZones(r.fallback); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.close()
	r.zones, r.fallback = r.fallback, nil
	r.epoch++
	return nil
}

// initZones reads each zone's range and first value, and keeps its energy_uj open.
func (r *rapl) initZones(zones []*raplZone) error {
	fsys, maxWatts := r.fs, r.maxWatts
	var err error
	t := r.now()
	for _, z := range zones {
		z.maxRange, err = readUint(fsys, filepath.Join(z.dir, "max_energy_range_uj"))
		if err != nil {
			return fmt.Errorf("rapl %s: %w", z.name, err)
		}
		if z.maxRange == 0 {
			return fmt.Errorf("rapl %s: max_energy_range_uj is 0", z.name)
		}
		z.window = time.Duration(float64(z.maxRange) / maxWatts * float64(time.Microsecond))
		z.last, err = readUint(fsys, filepath.Join(z.dir, "energy_uj"))
		if err != nil {
			return fmt.Errorf("rapl %s: %w", z.name, err)
		}
		z.lastAt = t
		// Readable: keep it open, one pread per reading from here on. (A refused read stopped
		// detection above, so the refusal is decided once, here.)
		z.energy = filepath.Join(z.dir, "energy_uj")
		if f, err := fsys.Open(z.energy); err == nil {
			z.f = f
		}
	}
	return nil
}

// close releases the energy files kept open; a later read fails.
func (r *rapl) close() {
	for _, z := range r.zones {
		if z.f != nil {
			_ = z.f.Close() // read-only
		}
	}
}

// readEnergy reads the zone's raw energy_uj.
func (z *raplZone) readEnergy(fsys fileSystem) (uint64, error) {
	if z.f != nil {
		return sampleUint(z.f, z.energy)
	}
	return readUint(fsys, z.energy)
}

// isRAPLZoneName accepts intel-rapl:N and intel-rapl:N:M with hex N and M (intel-rapl:a on
// hosts with ten or more sockets). intel-rapl-mmio duplicates the MSR package zone and is left
// out; AMD Zen uses the same intel-rapl paths.
func isRAPLZoneName(n string) bool {
	rest, ok := strings.CutPrefix(n, "intel-rapl:")
	if !ok {
		return false
	}
	parts := strings.Split(rest, ":")
	if len(parts) > 2 {
		return false
	}
	for _, p := range parts {
		if p == "" {
			return false
		}
		for _, c := range p {
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}

// window is the shortest time over the zones in which a counter could wrap at maxWatts. A
// reader must come back sooner than that for a wrap to be unambiguous.
func (r *rapl) window() time.Duration {
	w := r.zones[0].window
	for _, z := range r.zones[1:] {
		w = min(w, z.window)
	}
	return w
}

// zoneNames names the zones summed, e.g. "package-0+dram".
func (r *rapl) zoneNames() string {
	var b strings.Builder
	for i, z := range r.zones {
		if i > 0 {
			b.WriteByte('+')
		}
		b.WriteString(z.name)
	}
	return b.String()
}

// read reads every zone and extends each past its wraparound: a value below the last one
// wrapped once, adding max_energy_range_uj − last + now (Kepler does the same). When the time
// since the zone's last read exceeds its window, or the step is more than maxWatts could
// draw, the step cannot be trusted and the epoch moves on: a span whose readings have
// different epochs gets ErrCounterWrap.
func (r *rapl) read() (raplReading, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.now()
	var sum uint64
	for _, z := range r.zones {
		v, err := z.readEnergy(r.fs)
		if err != nil {
			return raplReading{}, fmt.Errorf("rapl %s: %w", z.name, err)
		}
		if v > z.maxRange {
			return raplReading{}, fmt.Errorf("rapl %s: energy_uj %d above max_energy_range_uj %d", z.name, v, z.maxRange)
		}
		gap := t.Sub(z.lastAt)
		var step uint64
		if v >= z.last {
			step = v - z.last
		} else {
			step = z.maxRange - z.last + v
		}
		if gap > z.window || float64(step) > r.maxWatts*(gap+2*time.Millisecond).Seconds()*1e6 {
			r.epoch++
		}
		z.total += step
		z.last, z.lastAt = v, t
		sum += z.total
	}
	return raplReading{uj: sum, epoch: r.epoch, at: t}, nil
}

// joules is the energy between two readings, or ErrCounterWrap when a wrap between them is
// ambiguous.
func (r *rapl) joules(a, b raplReading) (float64, error) {
	if a.epoch != b.epoch {
		return 0, fmt.Errorf("rapl %s: %w", r.zoneNames(), ErrCounterWrap)
	}
	return float64(b.uj-a.uj) / 1e6, nil
}
