//go:build darwin

package meter

import (
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The macOS system calls of the Apple Silicon meter, made through purego (dlopen and a Go
// trampoline) so that the binary needs no cgo and `GOOS=darwin go build` works from any host.
// The structures they fill are decoded by apple_layout.go; the rules are apple_rules.go's.
//
// UNVERIFIED: this file compiles and vets for darwin/arm64, but it has not been run on a Mac.

const (
	libSystem      = "/usr/lib/libSystem.B.dylib"
	libIOKit       = "/System/Library/Frameworks/IOKit.framework/IOKit"
	libIOReport    = "/usr/lib/libIOReport.dylib"
	libCF          = "/System/Library/Frameworks/CoreFoundation.framework/CoreFoundation"
	cfStringUTF8   = 0x08000100 // kCFStringEncodingUTF8
	cfNumberSInt64 = 4          // kCFNumberSInt64Type
	railGroup      = "Energy Model"
	railChannel    = "GPU Energy"
	railUnit       = "nJ"
)

// bind looks name up in lib and points fptr at it; a missing symbol is an error, not a panic.
func bind(lib uintptr, name string, fptr any) error {
	sym, err := purego.Dlsym(lib, name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	purego.RegisterFunc(fptr, sym)
	return nil
}

// darwinCPU reads CPU energy through libproc.
type darwinCPU struct {
	self         int32
	numer, denom uint32

	procPidRusage     func(pid int32, flavor int32, buf unsafe.Pointer) int32
	procPidinfo       func(pid int32, flavor int32, arg uint64, buf unsafe.Pointer, size int32) int32
	procListChildPids func(ppid int32, buf unsafe.Pointer, size int32) int32
	pthreadThreadidNp func(thread uintptr, id *uint64) int32
	machTimebaseInfo  func(info unsafe.Pointer) int32
}

var _ appleCPU = (*darwinCPU)(nil)

func newDarwinCPU() (*darwinCPU, error) {
	lib, err := purego.Dlopen(libSystem, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoData, err)
	}
	c := &darwinCPU{self: int32(os.Getpid())}
	for name, f := range map[string]any{
		"proc_pid_rusage":     &c.procPidRusage,
		"proc_pidinfo":        &c.procPidinfo,
		"proc_listchildpids":  &c.procListChildPids,
		"pthread_threadid_np": &c.pthreadThreadidNp,
		"mach_timebase_info":  &c.machTimebaseInfo,
	} {
		if err := bind(lib, name, f); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoData, err)
		}
	}
	var tb [2]uint32
	if c.machTimebaseInfo(unsafe.Pointer(&tb)) != 0 || tb[1] == 0 {
		return nil, fmt.Errorf("%w: mach_timebase_info failed", ErrNoData)
	}
	c.numer, c.denom = tb[0], tb[1]
	// One read of this process proves the layout before any span relies on it.
	if _, err := c.Rusage(int(c.self)); err != nil {
		return nil, err
	}
	if _, err := c.ThreadEnergy(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *darwinCPU) Timebase() (uint32, uint32) { return c.numer, c.denom }

func (c *darwinCPU) Rusage(pid int) (rusageV6, error) {
	var buf [rusageV6Size]byte
	if r := c.procPidRusage(int32(pid), rusageInfoV6, unsafe.Pointer(&buf)); r != 0 {
		return rusageV6{}, fmt.Errorf("proc_pid_rusage %d: returned %d", pid, r)
	}
	return decodeRusageV6(buf[:])
}

// ThreadEnergy reads the calling thread's own energy; the caller holds its OS thread.
func (c *darwinCPU) ThreadEnergy() (uint64, error) {
	var tid uint64
	if c.pthreadThreadidNp(0, &tid) != 0 {
		return 0, errors.New("pthread_threadid_np failed")
	}
	var buf [threadCountsSize + 8]byte // room to see a larger layout and refuse it
	n := c.procPidinfo(c.self, procPIDThreadCnt, tid, unsafe.Pointer(&buf), int32(len(buf)))
	if n <= 0 {
		return 0, fmt.Errorf("proc_pidinfo PROC_PIDTHREADCOUNTS: returned %d", n)
	}
	return decodeThreadCounts(buf[:], int(n))
}

func (c *darwinCPU) Children(pid int, dst []int) ([]int, error) {
	var buf [maxTree]int32
	// libproc's proc_listchildpids returns a count of PIDs (proc_listpids' bytes / sizeof(int)).
	n := c.procListChildPids(int32(pid), unsafe.Pointer(&buf), int32(unsafe.Sizeof(buf)))
	if n < 0 {
		return dst, fmt.Errorf("proc_listchildpids %d: returned %d", pid, n)
	}
	for _, p := range buf[:min(int(n), len(buf))] {
		if p > 0 {
			dst = append(dst, int(p))
		}
	}
	return dst, nil
}

// darwinGPU reads the GPU rail through IOReport and the GPU clients through IOKit.
type darwinGPU struct {
	sub, subbed uintptr // the IOReport subscription to the Energy Model group
	keys        cfKeys  // made once in newDarwinGPU, read-only after

	// CoreFoundation
	cfStringCreate   func(alloc uintptr, s string, enc uint32) uintptr
	cfStringGetC     func(s uintptr, buf unsafe.Pointer, size int64, enc uint32) bool
	cfDictGet        func(d, key uintptr) uintptr
	cfArrayCount     func(a uintptr) int64
	cfArrayAt        func(a uintptr, i int64) uintptr
	cfNumberGetValue func(n uintptr, typ int64, v unsafe.Pointer) bool
	cfRelease        func(o uintptr)
	cfGetTypeID      func(o uintptr) uint64
	cfStringTypeID   func() uint64
	cfNumberTypeID   func() uint64
	cfArrayTypeID    func() uint64
	cfDictTypeID     func() uint64
	// IOReport
	copyChannels  func(group, subgroup uintptr, a, b, c uint64) uintptr
	createSub     func(a, channels uintptr, subbed *uintptr, id uint64, b uintptr) uintptr
	createSamples func(sub, subbed, b uintptr) uintptr
	channelName   func(ch uintptr) uintptr
	unitLabel     func(ch uintptr) uintptr
	simpleValue   func(ch uintptr, idx int32) int64
	// IOKit
	serviceMatching func(name string) uintptr
	matchingSvcs    func(port uint32, matching uintptr, it *uint32) int32
	iteratorNext    func(it uint32) uint32
	childIterator   func(entry uint32, plane string, it *uint32) int32
	createProps     func(entry uint32, props *uintptr, alloc uintptr, opts uint32) int32
	entryID         func(entry uint32, id *uint64) int32
	objectRelease   func(o uint32) int32
}

var _ appleGPUReader = (*darwinGPU)(nil)

func newDarwinGPU() (*darwinGPU, error) {
	g := &darwinGPU{}
	libs := map[string]map[string]any{
		libCF: {
			"CFStringCreateWithCString": &g.cfStringCreate, "CFStringGetCString": &g.cfStringGetC,
			"CFDictionaryGetValue": &g.cfDictGet, "CFArrayGetCount": &g.cfArrayCount,
			"CFArrayGetValueAtIndex": &g.cfArrayAt, "CFNumberGetValue": &g.cfNumberGetValue,
			"CFRelease": &g.cfRelease, "CFGetTypeID": &g.cfGetTypeID, "CFStringGetTypeID": &g.cfStringTypeID,
			"CFNumberGetTypeID": &g.cfNumberTypeID, "CFArrayGetTypeID": &g.cfArrayTypeID,
			"CFDictionaryGetTypeID": &g.cfDictTypeID,
		},
		libIOReport: {
			"IOReportCopyChannelsInGroup": &g.copyChannels, "IOReportCreateSubscription": &g.createSub,
			"IOReportCreateSamples": &g.createSamples, "IOReportChannelGetChannelName": &g.channelName,
			"IOReportChannelGetUnitLabel": &g.unitLabel, "IOReportSimpleGetIntegerValue": &g.simpleValue,
		},
		libIOKit: {
			"IOServiceMatching": &g.serviceMatching, "IOServiceGetMatchingServices": &g.matchingSvcs,
			"IOIteratorNext": &g.iteratorNext, "IORegistryEntryGetChildIterator": &g.childIterator,
			"IORegistryEntryCreateCFProperties": &g.createProps, "IORegistryEntryGetRegistryEntryID": &g.entryID,
			"IOObjectRelease": &g.objectRelease,
		},
	}
	for path, syms := range libs {
		lib, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoData, err)
		}
		for name, f := range syms {
			if err := bind(lib, name, f); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrNoData, err)
			}
		}
	}
	// Every CFString key is made now, so the reader shares only read-only state: Rail and
	// Clients run concurrently (the rail watcher beside request goroutines).
	key := func(k string) uintptr { return g.cfStringCreate(0, k, cfStringUTF8) }
	g.keys = cfKeys{rail: key(railGroup), channels: key("IOReportChannels"), creator: key("IOUserClientCreator"),
		appUsage: key("AppUsage"), gpuTime: key("accumulatedGPUTime")}
	channels := g.copyChannels(g.keys.rail, 0, 0, 0, 0)
	if channels == 0 {
		return nil, fmt.Errorf("%w: IOReport has no %q group", ErrNoData, railGroup)
	}
	g.sub = g.createSub(0, channels, &g.subbed, 0, 0)
	g.cfRelease(channels)
	if g.sub == 0 || g.subbed == 0 {
		return nil, fmt.Errorf("%w: IOReport subscription to %q refused", ErrNoData, railGroup)
	}
	if _, err := g.Rail(); err != nil {
		return nil, err
	}
	if _, err := g.Clients(nil); err != nil {
		return nil, err
	}
	return g, nil
}

// cfKeys are the CFString keys the reader looks up, kept for its life.
type cfKeys struct{ rail, channels, creator, appUsage, gpuTime uintptr }

// goString copies a CFString; "" for anything else.
func (g *darwinGPU) goString(s uintptr) string {
	if s == 0 || g.cfGetTypeID(s) != g.cfStringTypeID() {
		return ""
	}
	var buf [256]byte
	if !g.cfStringGetC(s, unsafe.Pointer(&buf), int64(len(buf)), cfStringUTF8) {
		return ""
	}
	for i, c := range buf {
		if c == 0 {
			return string(buf[:i])
		}
	}
	return ""
}

func (g *darwinGPU) int64Of(n uintptr) (int64, bool) {
	if n == 0 || g.cfGetTypeID(n) != g.cfNumberTypeID() {
		return 0, false
	}
	var v int64
	return v, g.cfNumberGetValue(n, cfNumberSInt64, unsafe.Pointer(&v))
}

// Rail reads IOReport's Energy Model / GPU Energy channel, in nJ; a channel in any other unit
// is refused (the mJ channels are frozen for an unprivileged reader).
func (g *darwinGPU) Rail() (uint64, error) {
	samples := g.createSamples(g.sub, g.subbed, 0)
	if samples == 0 {
		return 0, errors.New("IOReportCreateSamples failed")
	}
	defer g.cfRelease(samples)
	arr := g.cfDictGet(samples, g.keys.channels)
	if arr == 0 || g.cfGetTypeID(arr) != g.cfArrayTypeID() {
		return 0, errors.New("IOReport samples hold no channels")
	}
	for i := range g.cfArrayCount(arr) {
		ch := g.cfArrayAt(arr, i)
		if g.goString(g.channelName(ch)) != railChannel {
			continue
		}
		if u := g.goString(g.unitLabel(ch)); u != railUnit {
			return 0, fmt.Errorf("%w: %s in %q, want %s", errLayout, railChannel, u, railUnit)
		}
		v := g.simpleValue(ch, 0)
		if v < 0 {
			return 0, fmt.Errorf("%s: negative value %d", railChannel, v)
		}
		return uint64(v), nil
	}
	return 0, fmt.Errorf("%w: no %q channel", ErrNoData, railChannel)
}

// Clients lists every IOAccelerator user client with its creator's PID and its GPU time.
func (g *darwinGPU) Clients(dst []gpuClient) ([]gpuClient, error) {
	var it uint32
	if r := g.matchingSvcs(0, g.serviceMatching("IOAccelerator"), &it); r != 0 {
		return dst, fmt.Errorf("IOServiceGetMatchingServices: %#x", r)
	}
	defer g.objectRelease(it)
	for svc := g.iteratorNext(it); svc != 0; svc = g.iteratorNext(it) {
		var cit uint32
		if g.childIterator(svc, "IOService", &cit) == 0 {
			for c := g.iteratorNext(cit); c != 0; c = g.iteratorNext(cit) {
				if cl, ok := g.client(c); ok {
					dst = append(dst, cl)
				}
				g.objectRelease(c)
			}
			g.objectRelease(cit)
		}
		g.objectRelease(svc)
	}
	return dst, nil
}

// client reads one user client's creator and the sum of its AppUsage accumulatedGPUTime.
func (g *darwinGPU) client(entry uint32) (gpuClient, bool) {
	var props uintptr
	if g.createProps(entry, &props, 0, 0) != 0 || props == 0 {
		return gpuClient{}, false
	}
	defer g.cfRelease(props)
	pid, ok := parseClientCreator(g.goString(g.cfDictGet(props, g.keys.creator)))
	if !ok {
		return gpuClient{}, false
	}
	cl := gpuClient{pid: pid}
	if g.entryID(entry, &cl.id) != 0 {
		return gpuClient{}, false
	}
	usage := g.cfDictGet(props, g.keys.appUsage)
	if usage != 0 && g.cfGetTypeID(usage) == g.cfArrayTypeID() {
		for i := range g.cfArrayCount(usage) {
			u := g.cfArrayAt(usage, i)
			if u == 0 || g.cfGetTypeID(u) != g.cfDictTypeID() {
				continue
			}
			if ns, ok := g.int64Of(g.cfDictGet(u, g.keys.gpuTime)); ok && ns > 0 {
				cl.ns += uint64(ns)
			}
		}
	}
	return cl, true
}

// newApple opens the Apple Silicon counters; either may be missing, with its reason.
func newApple() (*apple, error) {
	a := &apple{sleep: time.Sleep, now: time.Now, poll: 5 * time.Millisecond}
	if cpu, err := newDarwinCPU(); err != nil {
		a.cpuErr = err
	} else {
		a.cpu = cpu
	}
	if gpu, err := newDarwinGPU(); err != nil {
		a.gpuErr = err
	} else {
		a.gpu = gpu
	}
	if a.cpu == nil && a.gpu == nil {
		return nil, errors.Join(a.cpuErr, a.gpuErr)
	}
	return a, nil
}
