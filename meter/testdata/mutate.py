# Mutation check for the energy-honesty rules and the counters: builds each mutant through
# `go test -overlay` (the sources are never written, so mutants run side by side and an
# interrupted run leaves no mutant behind), runs `go test -count=1 -failfast .` in meter/ and
# reports each mutation as
#   CAUGHT   a test failed
#   MISSED   the tests passed: the rule is not guarded
#   BUILD    the mutant did not compile (or vet refused it): that proves nothing, so it is not
#            caught; rewrite the mutation so that it compiles
#   MISSING  the pattern is not in the file exactly once: update it to the code as it is now
# and the script exits 1 unless every mutation is CAUGHT. Run from meter/:
#   python3 testdata/mutate.py [-j N] [name substring ...]
# -j is the number of mutants tested at once (default: the CPU count). scripts/test.sh runs it.
import concurrent.futures, json, os, subprocess, sys, tempfile, time
muts = [
 ("always measured", "rules.go", "\tf.Grade = energy.Estimated\n\tif cpuMeasured && gpuMeasured {", "\tf.Grade = energy.Measured\n\tif cpuMeasured && gpuMeasured {"),
 ("always measured (token path too)", "rules.go", "Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: MethodTokenModel", "Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: MethodTokenModel"),
 ("overlap ignored in rules", "rules.go", "\tif s.Overlap {\n\t\trs.add(ReasonSpanOverlap)", "\tif false {\n\t\trs.add(ReasonSpanOverlap)"),
 ("overlap ignored for GPU", "rules.go", "case s.Overlap || s.GPUShare < dominantShare:", "case s.GPUShare < dominantShare:"),
 ("overlap only checked at Begin", "span.go", "overlap = s.overlap || m.begins != s.seq", "overlap = s.overlap"),
 ("99% check removed", "rules.go", "} else if !dominant(s.TreeCPU+s.ProxyCPU, s.HostBusy) {", "} else if false {"),
 ("99% check without the proxy", "rules.go", "!dominant(s.TreeCPU+s.ProxyCPU, s.HostBusy)", "!dominant(s.TreeCPU, s.HostBusy)"),
 ("GPU share check removed", "rules.go", "case s.Overlap || s.GPUShare < dominantShare:", "case s.Overlap:"),
 ("exact zero replaced by rail read", "rules.go", "f.GPUJoules = 0 // exactly", "f.GPUJoules = s.GPUJoules // exactly"),
 ("vanished GPU process ignored (rules)", "rules.go", "\tcase s.GPUVanished:\n\t\tf.Coverage = energy.CoveragePartial\n\t\trs.add(ReasonGPUVanished)\n", ""),
 ("vanished GPU process ignored (detection)", "gpu.go", "\t\t\t\tvanished = true\n", ""),
 ("vanished CPU process ignored", "tree.go", "\t\tif !found {\n\t\t\tshort = true\n\t\t}\n\t}\n\treturn ns, short", "\t\t_ = found\n\t}\n\treturn ns, short"),
 ("short CPU count reported as a figure", "rules.go", "\tcase s.TreeShort:\n\t\trs.add(ReasonProcessVanished)\n\t\treturn tokenFigure(s, rs)\n", ""),
 ("wrap ignored (no extension)", "rapl.go", "step = z.maxRange - z.last + v", "step = 0"),
 ("double wrap ignored (gap check)", "rapl.go", "if gap > z.window || float64(step)", "if float64(step)"),
 ("implausible step ignored", "rapl.go", "if gap > z.window || float64(step) > r.maxWatts*(gap+2*time.Millisecond).Seconds()*1e6 {", "if gap > z.window {"),
 ("wrap epoch ignored", "rapl.go", "if a.epoch != b.epoch {", "if false {"),
 ("stale NVML accepted", "counter.go", "\t\t\tw.err = fmt.Errorf(\"nvml: %w within %v\", ErrCounterStale, g.wait)\n", "\t\t\tw.res = counterValue{v: w.base, at: r.t1, readDone: r.t1, seq: r.seq}\n"),
 ("no wait for NVML update", "counter.go", "\t\t\tif r.v != w.base {\n\t\t\t\tw.res = counterValue{v: r.v,", "\t\t\tif true {\n\t\t\t\tw.res = counterValue{v: w.base,"),
 ("psys added to packages", "rapl.go", "maxWatts: maxWatts, zones: psys}", "maxWatts: maxWatts, zones: append(append(psys, pkgs...), drams...)}"),
 ("core zones added", "rapl.go", "\t\tcase zn == \"dram\":", "\t\tcase zn == \"dram\" || zn == \"core\":"),
 ("decimal-only zone names", "rapl.go", "(c < '0' || c > '9') && (c < 'a' || c > 'f')", "(c < '0' || c > '9')"),
 ("permission error not sticky: ignored at start", "rapl.go", "\t\tz.last, err = readUint(fsys, filepath.Join(z.dir, \"energy_uj\"))\n\t\tif err != nil {", "\t\tz.last, err = readUint(fsys, filepath.Join(z.dir, \"energy_uj\"))\n\t\tif err != nil && false {"),
 ("dead counter used anyway", "meter.go", "m.rapl, m.raplErr = nil, fmt.Errorf(\"rapl: %w: %s\", errCounterDead, res.Detail)", "_ = res"),
 ("new child not counted", "tree.go", "\t\t\tif started(e.pid) {\n\t\t\t\tns += e.cpu", "\t\t\tif started(e.pid) {\n\t\t\t\tns += 0"),
 # The cost work: a cheaper span must not be a less honest one.
 ("cached tree trusted though a PID was handed out", "tree.go", "known, upTo = m.newPIDsOutside(t, from, cur, unborn)", "_, upTo = m.newPIDsOutside(t, from, cur, unborn)"),
 ("a PID not yet in /proc counted gone at once", "tree.go", "upTo = id - 1 // gone, or not yet born: looked at again next time", "upTo = cur"),
 ("a PID missing twice not counted gone", "tree.go", "if id != unborn && upTo == cur {", "if upTo == cur {"),
 ("new PID: its parent not checked against the tree", "tree.go", "slices.Contains(tree, pid) || slices.Contains(tree, ppid)", "slices.Contains(tree, pid) || ppid < 0"),
 ("new PID: a reused tree PID not noticed", "tree.go", "slices.Contains(tree, pid) || slices.Contains(tree, ppid)", "slices.Contains(tree, ppid)"),
 ("new PID: the pidfd's answer is the thread group, not the parent", "clock_linux.go", "return int(info.Ppid), nil", "return int(info.Tgid), nil"),
 ("new PID: a PID without a task not taken as gone by the pidfd", "clock_linux.go", "\t\tif errors.Is(err, unix.ESRCH) {\n\t\t\treturn 0, fs.ErrNotExist\n\t\t}\n\t\treturn 0, errNoPidInfo\n\t}\n\tdefer closeFD(fd)", "\t\treturn 0, errNoPidInfo\n\t}\n\tdefer closeFD(fd)"),
 ("new PID: the pidfd's parent taken where the kernel has none to give", "proc.go", "\t\tif !errors.Is(err, errNoPidInfo) {\n\t\t\treturn ppid, err\n\t\t}", "\t\tif true {\n\t\t\treturn ppid, err\n\t\t}"),
 ("new PID: an unreadable stat taken as outside", "tree.go", "if err != nil || slices.Contains(tree, pid)", "if slices.Contains(tree, pid)"),
 ("new PID: a wrap or too many trusted", "tree.go", "if cur-from > maxNewPIDs { // a wrap makes the difference huge", "if false {"),
 ("root not checked alive at End", "tree.go", "if !atEnd || b.aliveLocked(m.proc) {", "if true {"),
 ("pidfd exit ignored", "clock_linux.go", "return n > 0, nil", "return n < 0, nil"),
 ("pidfd watch: the exit never marked", "clock_linux.go", "ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(pidfd)}", "ev := unix.EpollEvent{Events: unix.EPOLLOUT, Fd: int32(pidfd)}"),
 ("root's pidfd kept without its exit watch", "proc.go", "\tif watch, err = pidfdWatch(fd); err != nil {\n\t\tcloseFD(fd)\n\t\treturn -1, -1\n\t}\n\treturn fd, watch", "\twatch, _ = pidfdWatch(fd)\n\treturn fd, -1"),
 ("ns_last_pid: a malformed number trusted", "proc.go", "\t\treturn v, err == nil\n", "\t\t_ = err\n\t\treturn v, true\n"),
 ("another namespace's /proc trusted for the last PID", "meter.go", "err == nil && self != strconv.Itoa(m.selfPID)", "err == nil && self != strconv.Itoa(m.selfPID) && false"),
 ("RAPL's reason word found once, as no-rapl whatever it was", "meter.go", "m.raplWhy = errOf(reasonFor(m.raplErr, ReasonNoRAPL))", "m.raplWhy = errOf(ReasonNoRAPL)"),
 ("a local span's counters allocated apart", "span.go", "\t\tls := &localSpan{}\n\t\ts, c = &ls.Span, &ls.c", "\t\ts, c = &Span{}, &spanCounters{}"),
 ("host and RAPL read under overlap", "span.go", "if m.rapl != nil && !s.overlap {", "if m.rapl != nil {"),
 ("in-process upstream looked up at every span", "backend.go", "case b.inProcess && time.Since(b.lastTry) < inProcessRecheck:", "case false:"),
 # Apple Silicon (issue 17): the rules are pure Go, so their mutants run on any OS.
 ("thread-leave: processes read though the thread's count did not rise", "apple_rules.go", "\t\tif after > before {", "\t\tif after >= before {"),
 ("thread-leave: a stayed thread accepted", "apple_rules.go", "\treturn errThreadStayed\n}", "\treturn nil\n}"),
 ("thread-leave: skipped before reading the processes", "apple.go", "if s.cpuErr = leaveCore(a.cpu.ThreadEnergy, a.sleep); s.cpuErr != nil {", "if false {"),
 ("thread counts: any size accepted", "apple_layout.go", "if n != threadCountsSize || len(b) < threadCountsSize {", "if len(b) < threadCountsSize {"),
 ("rusage_info_v6: a longer layout accepted", "apple_layout.go", "if len(b) != rusageV6Size {", "if len(b) < rusageV6Size {"),
 ("rail read without waiting for its next change", "apple_rules.go", "\t\tif v != first {", "\t\tif v >= first {"),
 ("rail held 1 s under load trusted", "apple_rules.go", "\t\t\t\treturn 0, errRailStale", "\t\t\t\treturn v, nil"),
 ("exact zero: rail used without GPU time", "apple_rules.go", "\tif tree == 0 && !r.Vanished {\n\t\treturn r // no GPU time: exactly 0\n\t}\n", ""),
 ("sole user: share taken as whole", "apple_rules.go", "\t\tr.Share = float64(tree) / float64(all)", "\t\tr.Share = 1"),
 ("sole user: 98% accepted", "rules.go", "const dominantShare = 0.99", "const dominantShare = 0.98"),
 ("vanished GPU client of the tree ignored", "apple_rules.go", "\t\tif !found {\n\t\t\tif inTree(x.pid) {\n\t\t\t\tr.Vanished = true\n", "\t\tif !found {\n\t\t\tif inTree(x.pid) {\n\t\t\t\tr.Vanished = false\n"),
 ("vanished GPU client of another process ignored", "apple_rules.go", "\t\t\t\tr.Vanished = true\n\t\t\t} else {\n\t\t\t\tothersGone = true\n\t\t\t}\n\t\t}\n\t}\n", "\t\t\t\tr.Vanished = true\n\t\t\t}\n\t\t}\n\t}\n"),
 ("rail split by GPU time share", "rules.go", "\t\tf.Coverage = energy.CoveragePartial\n\t\trs.add(ReasonGPUShared)", "\t\tf.GPUJoules = s.GPUJoules * s.GPUShare"),
 ("frozen rail used anyway", "apple.go", "a.gpu, a.gpuErr = nil, fmt.Errorf(\"gpu-rail: %w: %s\", errCounterDead, res.Detail)", "_ = res"),
 ("GPU assumed unused without the clients", "apple.go", "in.GPUUsed, in.GPUErr = true, a.gpuErr", "in.GPUErr = a.gpuErr"),
 ("per-process energy measured though a process vanished", "rules.go", "cpuMeasured = cpuMeasured && !s.TreeShort", "_ = s.TreeShort"),
 # Issue 10: energy truth.
 ("overlap unreported without RAPL", "rules.go", "\tif s.Overlap {\n\t\trs.add(ReasonSpanOverlap)", "\tif s.Overlap && s.RAPLErr == nil {\n\t\trs.add(ReasonSpanOverlap)"),
 ("union bound removed: each overlapping call billed the tree's whole time", "backend.go", "o.share.cpu += float64(ns) / float64(n)", "o.share.cpu += float64(ns)"),
 ("union bound removed for the GPU model's wall time", "backend.go", "o.share.wall += wall / time.Duration(n)", "o.share.wall += wall"),
 ("GPU model on the whole wall time under overlap", "rules.go", "\t\t\twall = s.WallShare", "\t\t\t_ = s.WallShare"),
 ("split share not named as its model", "rules.go", "\t\t\tcpuMethod = MethodCPUTimeShare\n", ""),
 ("overlapped share taken as measured", "rules.go", "\t\tcpuMeasured = !s.Overlap", "\t\tcpuMeasured = true"),
 ("host busy 0 ticks taken as sole user", "rules.go", "} else if s.HostBusy == 0 {", "} else if false {"),
 ("zero RAPL delta beside tree CPU accepted", "rules.go", "s.RAPLJoules == 0 && s.TreeCPU > 0", "s.RAPLJoules == 0 && s.TreeCPU < 0"),
 ("exact zero from PID lists alone", "span.go", "in.GPUUnknown = ev.held || !ev.known || r.Unknown ||", "in.GPUUnknown = false && ev.held || false && !ev.known || false && r.Unknown || false &&"),
 ("device node ignored while NVML is live", "span.go", "in.GPUUnknown = ev.held || !ev.known ||", "in.GPUUnknown = (ev.held && false) || !ev.known ||"),
 ("unreadable descriptors taken as no GPU (NVML)", "span.go", "in.GPUUnknown = ev.held || !ev.known ||", "in.GPUUnknown = ev.held || (!ev.known && false) ||"),
 ("NVML PIDs of another namespace ignored", "span.go", "|| s.m.foreignGPUPIDs(s.m.gpu.seenPIDs(", "|| false && s.m.foreignGPUPIDs(s.m.gpu.seenPIDs("),
 ("unreadable descriptors taken as no GPU (no NVML)", "span.go", "\t\tcase !known:\n\t\t\tin.GPUUnknown = true\n", "\t\tcase !known && false:\n\t\t\tin.GPUUnknown = true\n"),
 ("descriptor read error swallowed", "backend.go", "\treturn used, err\n}", "\t_ = err\n\treturn used, nil\n}"),
 ("unknown GPU use taken as exact zero", "rules.go", "\tcase !s.GPUUsed && s.GPUUnknown:", "\tcase false:"),
 ("foreign utilisation samples not another user", "gpu.go", "\t\t\t\tothers = true // in no PID list, perhaps, but it used the GPU\n", ""),
 ("liveness: advances 5 -> 1", "rules.go", "probeAdvances = 5", "probeAdvances = 1"),
 ("liveness: advances 5 -> 6", "rules.go", "probeAdvances = 5", "probeAdvances = 6"),
 ("liveness: quorum 80% -> 70%", "rules.go", "probeQuorum   = 0.8", "probeQuorum   = 0.7"),
 ("liveness: quorum 80% -> 90%", "rules.go", "probeQuorum   = 0.8", "probeQuorum   = 0.9"),
 ("liveness: window 300 ms -> 100 ms", "rules.go", "probeWindow   = 300 * time.Millisecond", "probeWindow   = 100 * time.Millisecond"),
 ("liveness on the sum of zones/GPUs", "probe.go", "\tif t.readParts != nil {", "\tif false {"),
 ("NVML start probe skipped", "meter.go", "\tif m.gpu != nil {\n\t\twg.Go(func() {\n\t\t\tif res := runProbe(m.nvmlTarget(), false)", "\tif false {\n\t\twg.Go(func() {\n\t\t\tif res := runProbe(m.nvmlTarget(), false)"),
 ("dead NVML used anyway", "meter.go", "\t\t\t\tm.gpu = nil\n", ""),
 ("frozen psys: no package+DRAM fallback", "meter.go", "if !res.Live && res.Err == nil && len(m.rapl.fallback) > 0 {", "if false {"),
 ("NVML energy going backwards within the span accepted", "gpu.go", "e1 < e0 || e2 < e0 || (e2 != e0 && e2 < e1) {", "e1 < e0 && e2 < e0 && e2 < e1 && false {"),
 ("NVML energy going backwards after the span accepted", "gpu.go", "\t\tif e3 < e2 {", "\t\tif false {"),
 ("NVML Begin not aligned to a counter update", "gpu.go", "\ta.err = g.nextUpdate(&a.snap, mine, a.val, a.at)\n", "\tcopy(a.val, a.snap.energy)\n\tfor _, i := range mine {\n\t\ta.at[i] = a.snap.at\n\t}\n"),
 ("NVML span with no update inside graded measured", "rules.go", "\t\tif s.GPUSubPeriod {\n\t\t\tgpuMeasured = false", "\t\tif false {\n\t\t\tgpuMeasured = false"),
 ("NVML span with no update inside not flagged", "gpu.go", "\t\t\tr.SubPeriod = true\n\t\t\t// Each update is seen at most a poll late", "\t\t\t// Each update is seen at most a poll late"),
 ("NVML rate ceiling removed", "gpu.go", "moved > ceiling*w.Seconds() {", "false && moved > ceiling*w.Seconds() {"),
 ("NVML rate ceiling removed (no update inside the span)", "gpu.go", "first > ceiling*w.Seconds() {", "false && first > ceiling*w.Seconds() {"),
 ("NVML rate ceiling at the bare power limit", "gpu.go", "const gpuExcursion = 1.5", "const gpuExcursion = 1.0"),
 ("NVML enforced power limit ignored", "gpu.go", "\t\tlimit, err := g.readLimit(i)", "\t\tlimit, err := gpuMaxWatts/gpuExcursion, error(nil)"),
 ("NVML window without the poll slack", "gpu.go", "w := at[i].Sub(align.at[i]) + 2*g.poll", "w := at[i].Sub(align.at[i])"),
 ("failed discovery: host J/token ignored", "rules.go", "\t\tif s.HostJPerToken > 0 {", "\t\tif false {"),
 ("failed discovery: an estimate learnt as host J/token", "span.go", "tok <= 0 || !f.Measured() ||", "tok <= 0 ||"),
 ("GPU power model's busy factor x10", "gpu.go", "busy += float64(tree) / 100 / float64(len(stamps))", "busy += float64(tree) / 10 / float64(len(stamps))"),
 ("macOS: overlapping calls each billed the tree's whole time", "apple.go", "\tif booked && s.share.split {", "\tif false && booked && s.share.split {"),
 # Bounds, re-derivable receipts and the token split (issue 10, items 5-7).
 ("bounds: CPU model's low end widened to 0", "rules.go", "f.Low = low.Seconds() * s.CPUWatts * energy.CPUModelLow", "f.Low = low.Seconds() * s.CPUWatts * 0"),
 ("bounds: CPU model's high end narrowed to the figure", "rules.go", "f.High = high.Seconds() * s.CPUWatts * energy.CPUModelHigh", "f.High = high.Seconds() * s.CPUWatts * 1"),
 ("bounds: share's high end without the other calls' time", "rules.go", "max(s.TreeUnion, cpu)", "cpu"),
 ("bounds: share's low end at the share", "rules.go", "low, high = min(s.TreeAlone, cpu), max(", "low, high = cpu, max("),
 ("bounds: edge book counts shared intervals as alone", "backend.go", "\t\t\tif n == 1 {\n\t\t\t\to.share.alone", "\t\t\tif n >= 1 {\n\t\t\t\to.share.alone"),
 ("bounds: NVML period slack removed", "rules.go", "slack := nvmlPeriod.Seconds() * cmp.Or(s.GPULimitW, s.GPUWatts)", "slack := 0 * cmp.Or(s.GPULimitW, s.GPUWatts)"),
 ("bounds: NVML board limit ignored", "rules.go", "cmp.Or(s.GPULimitW, s.GPUWatts)", "s.GPUWatts"),
 ("bounds: NVML counter bounds ignored", "rules.go", "\t\t\tf.Low += min(s.GPULow, f.GPUJoules)\n\t\t\tf.High += min(max(s.GPUHigh, f.GPUJoules), ceil)", "\t\t\tf.Low += f.GPUJoules\n\t\t\tf.High += min(f.GPUJoules, ceil)"),
 ("NVML brackets split by time even with the idle power", "gpu.go", "\tif quiet && idleW > 0 {", "\tif false {"),
 ("NVML idle split where the bracket does not look busy", "gpu.go", "busy >= idleW*ours {", "true {"),
 ("NVML Begin bracket idle though a span ended in it", "gpu.go", "beginQuiet := align.alone && align.prevEnd.Before(u0)", "beginQuiet := align.alone"),
 ("NVML End bracket idle though a span began after", "gpu.go", "endAlone := !g.lastBegin.After(begin.at)", "endAlone := true"),
 ("NVML idle power read while a span ran lately", "gpu.go", "a.quiet = a.alone && now.Sub(g.lastEnd) >= quietFor", "a.quiet = true"),
 ("NVML End reads every device's energy", "gpu.go", "g.readEnergy(s, devsOf(a.mine), at)", "g.readEnergy(s, devsOf(slices.Repeat([]bool{true}, len(g.devs))), at)"),
 ("NVML Begin reads every device's energy", "gpu.go", "g.readEnergy(s, devsOf(a.mine), a.start)", "g.readEnergy(s, devsOf(slices.Repeat([]bool{true}, len(g.devs))), a.start)"),
 # One counter reader per device (issue 27): no span reads NVML's energy counter itself.
 ("Begin reads the counter itself", "gpu.go", "\t\tg.readEnergy(s, devsOf(a.mine), a.start)\n", "\t\tg.readEnergy(s, devsOf(a.mine), a.start)\n\t\tfor _, i := range devsOf(a.mine) {\n\t\t\ts.energy[i], s.eerr[i] = g.devs[i].EnergyMJ()\n\t\t}\n"),
 ("End reads the counter itself", "gpu.go", "\tg.readEnergy(s, devsOf(a.mine), at)\n", "\tg.readEnergy(s, devsOf(a.mine), at)\n\tfor _, i := range devsOf(a.mine) {\n\t\ts.energy[i], s.eerr[i] = g.devs[i].EnergyMJ()\n\t}\n"),
 ("an edge's counter value taken as exact though the counter moved", "counter.go", "l.err == nil && l.v == r.v && !l.t1.After(w.at)", "l.err == nil && !l.t1.After(w.at)"),
 ("an edge's counter value taken as exact though the read before it was not done", "counter.go", "l.err == nil && l.v == r.v && !l.t1.After(w.at)", "l.err == nil && l.v == r.v"),
 ("an update timed from the want's edge, not the last read that still gave its value", "counter.go", "\t\tlast = later(last, r.mid())\n", ""),
 ("counter reader never stops while the meter is open", "counter.go", "\t\tif len(c.wants) == 0 {\n\t\t\tc.running = false", "\t\tif len(c.wants) == 0 && g.shut {\n\t\t\tc.running = false"),
 ("NVML GPU the tree started on mid-span taken as read", "gpu.go", "\t\tif !align.mine[i] {\n\t\t\treturn r, fmt.Errorf(\"gpu %d %s: %w\", i, g.devs[i].Name(), ErrGPULate)", "\t\tif false {\n\t\t\treturn r, fmt.Errorf(\"gpu %d %s: %w\", i, g.devs[i].Name(), ErrGPULate)"),
 ("NVML GPU the tree started on mid-span taken as read (End's figure)", "gpu.go", "\t\tif begun && !a.mine[i] {", "\t\tif false && begun && !a.mine[i] {"),
 ("GPU started mid-span said as a counter error", "rules.go", "\tcase errors.Is(err, ErrGPULate):\n\t\treturn ReasonGPULate\n", ""),
 ("NVML reads every poll, not near the update", "gpu.go", "\treturn max(wait, g.poll)", "\t_ = wait\n\treturn g.poll"),
 ("NVML reads predicted many periods ahead", "gpu.go", "\tif k > 2 {\n\t\treturn g.poll\n\t}\n", ""),
 ("NVML period not measured at start", "gpu.go", "\tg.period = slices.Max(periods)\n", "\t_ = periods\n"),
 ("bounds: RAPL read gap ignored", "rules.go", "slack := (s.RAPLGap + 2*raplUpdate).Seconds() * watts", "slack := (2 * raplUpdate).Seconds() * watts"),
 ("bounds: RAPL read gap not measured", "span.go", "in.RAPLGap = max(s.start.Sub(c.raplA.at), 0) + max(e.rapl.at.Sub(e.end), 0)", "_ = e.end"),
 ("bounds: token model's range narrowed", "rules.go", "tokenModelHigh = 4.35 / 0.455", "tokenModelHigh = 1.0"),
 ("bounds: token model's range widened", "rules.go", "tokenModelLow  = 0.070 / 0.455", "tokenModelLow  = 0.0"),
 ("bounds: GPU model's range narrowed", "rules.go", "low, high := f.GPUJoules*gpuModelLow, f.GPUJoules*gpuModelHigh", "low, high := f.GPUJoules*gpuModelLow, f.GPUJoules"),
 ("bounds: Plus does not add the high ends", "../energy/energy.go", "High:             f.High + g.High,", "High:             f.High,"),
 ("bounds: rounding drops the bounds", "../energy/energy.go", "f.Low, f.High = RoundNano(f.Low), RoundNano(f.High)", "f.Low, f.High = RoundNano(f.Low), RoundNano(f.Joules)"),
 ("recompute: tolerance widened to a millijoule", "recompute.go", "recomputeAbs = 2e-9", "recomputeAbs = 1e-3"),
 ("recompute: method not compared", "recompute.go", "\t\t{\"method\", recorded.Method, derived.Method},\n", ""),
 ("recompute: bounds not compared", "recompute.go", "\t\t{\"joules_low\", recorded.Low, derived.Low},\n", ""),
 ("recompute: constants version not checked", "recompute.go", "\tif !ok {\n\t\treturn energy.Figure{}, fmt.Errorf(\"inputs made under constants", "\tif false && !ok {\n\t\treturn energy.Figure{}, fmt.Errorf(\"inputs made under constants"),
 ("recompute: meter-1 records refused", "recompute.go", "\tcase \"meter-1\":\n\t\treturn 1, true\n", ""),
 ("recompute: meter-2 records made under this build's rules", "recompute.go", "\ts.Legacy = legacy\n", "\ts.Legacy = legacy * 0\n"),
 # Issue 34: no CPU figure above what every core could draw.
 ("CPU time not capped at the cores x the wall time", "rules.go", "\tcpu := capCPU(s.TreeCPU, s)\n", "\tcpu := s.TreeCPU\n"),
 ("CPU High not capped at the cores x the wall time", "rules.go", "capCPU(high+s.CPUSlack, s)", "high+s.CPUSlack"),
 ("CPU cap at twice the cores", "rules.go", "return min(d, time.Duration(s.Cores*float64(s.Wall)))", "return min(d, time.Duration(2*s.Cores*float64(s.Wall)))"),
 ("CPU bounds without the tick slack", "rules.go", "low, high = max(low-s.CPUSlack, 0), capCPU(high+s.CPUSlack, s)", "low, high = max(low, 0), capCPU(high, s)"),
 ("tick slack not recorded", "span.go", "in.CPUSlack = time.Duration(len(s.c.procsA)+len(e.procs)) * time.Duration(tickNs)", "in.CPUSlack = 0"),
 ("cores not recorded", "span.go", "\t\tin.Cores = s.m.coresOf(s.b, s.c.procsA, e.procs)\n", ""),
 ("backend's cgroup quota ignored", "cores.go", "\t\t\tcores = min(cores, q)\n", "\t\t\t_ = q\n"),
 ("tree's affinity ignored", "cores.go", "\t\t\tcores = min(cores, float64(len(slices.Compact(allowed))))\n", "\t\t\t_ = allowed\n"),
 ("tree's cgroups' quotas ignored", "cores.go", "\t\tcores = min(cores, quota)\n", ""),
 ("tree's cgroup ancestors' quotas ignored", "cores.go", "\t\tif d == root {\n\t\t\tbreak", "\t\tif true {\n\t\t\tbreak"),
 ("CPU cap from the proxy's CPUs, not the host's", "cores.go", "\t\t\treturn float64(len(cpus))\n", "\t\t\treturn float64(runtime.NumCPU())\n"),
 ("cores cached across a changed tree", "cores.go", "if c.ok && slices.Equal(c.pids, key) {", "if c.ok {"),
 ("GPU part not capped at 1.5 x the limit x the wall (counter)", "rules.go", "\t\t\tf.GPUJoules = min(f.GPUJoules, ceil)\n\t\t\tf.Low += min(s.GPULow, f.GPUJoules)", "\t\t\tf.Low += min(s.GPULow, f.GPUJoules)"),
 ("GPU High not capped at 1.5 x the limit x the wall", "rules.go", "f.High += min(max(s.GPUHigh, f.GPUJoules), ceil)", "f.High += max(s.GPUHigh, f.GPUJoules)"),
 ("GPU model not capped at the ceiling", "rules.go", "f.GPUJoules, low, high = min(f.GPUJoules, ceil), min(low, ceil), min(high, ceil)", "_ = ceil"),
 ("recompute: figure not made from its recorded inputs", "recompute.go", "\tf, _ := spanFigure(in) // the version is this build's\n\treturn f", "\treturn energy.SplitTokens(attribute(s), s.PromptTokens, s.CompletionTokens, DefaultPromptRatio)"),
 ("recompute: recorded reasons not read back", "rules.go", "if recorded, ok := err.(reasonError); ok {", "if recorded, ok := err.(reasonError); ok && false {"),
 ("split: phases ignored", "phase.go", "\tif !in.Marked && !in.MarkUnread || f.Split == \"\" {", "\tif true || f.Split == \"\" {"),
 ("split: an unread mark read as an empty phase", "span.go", "\tif s.marked && s.markOK {\n\t\tin.Marked, in.MarkCPU = true, time.Duration(s.markCPU)\n\t} else if s.marked {", "\tif s.marked {\n\t\tin.Marked, in.MarkCPU = true, time.Duration(s.markCPU)\n\t} else if false {"),
 ("split: an unread mark not said", "phase.go", "\tcase in.MarkUnread:\n\t\twhy = PhaseUnread\n", ""),
 ("split: an empty phase used", "phase.go", "case in.MarkCPUNS <= 0 || in.MarkCPUNS >= in.TreeCPUNS:", "case in.MarkCPUNS < 0:"),
 ("split: a GPU part split by CPU time", "phase.go", "\tcase f.Method != MethodCPUTimeModel && f.Method != MethodCPUTimeShare && f.Method != MethodRAPL:", "\tcase false:"),
 ("split: the mark books no edge", "phase.go", "\ts.m.bookMark(s.b, procs, cg, s.m.opts.now())\n", "\t_, _ = procs, cg\n"),
 # Issue 27: sole use proven over the whole span, no wait on the response, physics, edges.
 ("GPU sampler's process lists ignored", "gpu.go", "\tg.seenBetween(i, start, endT, func(r pidRead) { out = append(out, r) })\n", ""),
 ("GPU process lists not read mid-span", "sampler.go", "\t\tl.addRead(at, pids, err)\n", "\t\t_, _, _ = at, pids, err\n"),
 ("foreign process on the device not another user", "gpu.go", "\t\t\t\tif !inTree(p) {\n\t\t\t\t\tothers = true\n", "\t\t\t\tif !inTree(p) && false {\n\t\t\t\t\tothers = true\n"),
 ("unreadable process list taken as empty (share)", "gpu.go", "\t\t\t\tothers = true // unknown, not empty\n", ""),
 ("unreadable process list taken as empty (exact zero)", "gpu.go", "\t\t\t\tunknown = true\n", ""),
 ("shared GPU with a failed counter priced by the model", "span.go", "\t\tin.GPUErr = nil\n", ""),
 ("End waits for the counter", "span.go", "\tif m.opts.SettleInline {", "\tif true {"),
 ("SettleInline ignored", "span.go", "\tif m.opts.SettleInline {", "\tif false {"),
 ("provisional figure taken as final", "gpu.go", "\tr.Provisional = true\n\tperiod := cmp.Or(g.period, nvmlPeriod)", "\tperiod := cmp.Or(g.period, nvmlPeriod)"),
 ("provisional figure before any process list claims the GPU", "gpu.go", "r := gpuResult{Unknown: true, Share: 1, Provisional: true}", "r := gpuResult{Used: true, Share: 1, Provisional: true}"),
 ("pending figure not flagged provisional", "rules.go", "\t\tf.Coverage = energy.CoveragePartial\n\t\tf.Provisional = true\n\t\trs.add(ReasonGPUPending)", "\t\tf.Coverage = energy.CoveragePartial\n\t\trs.add(ReasonGPUPending)"),
 ("pending figure's High without the boards' ceiling", "rules.go", "\t\t\tf.High += gpuCeiling(s)\n\t\t}\n\tcase !s.GPUUsed && s.GPUUnknown:", "\t\t}\n\tcase !s.GPUUsed && s.GPUUnknown:"),
 ("samplers never stop while the meter is open", "sampler.go", "\t\tif g.refs <= 0 || g.closed {", "\t\tif g.closed {"),
 ("samplers' span count never released", "sampler.go", "func (g *gpus) release() { g.refs-- }", "func (g *gpus) release() {}"),
 ("Close does not wait for the spans' background reads", "gpu.go", "\tg.stopSamplers()\n\tg.bg.Wait()\n", "\tg.stopSamplers()\n"),
 ("utilisation samples matched by when they were read", "gpu.go", "\t\t\t\tif s.TimeStamp < from || s.TimeStamp > to {", "\t\t\t\tif (s.TimeStamp < from || s.TimeStamp > to) && (s.at.Before(start) || s.at.After(endT)) {"),
 ("sampler logs every read, not each list once", "sampler.go", "\t\t\tlast.until = at\n\t\t\treturn\n", "\t\t\tlast.until = at\n"),
 ("sampler log unbounded", "sampler.go", "\tif len(l.reads) > maxRuns {", "\tif false {"),
 ("sampler log bound drops the oldest list", "sampler.go", "\t\tl.reads[1] = pidRead{at: a.at, until: b.until, pids: slices.Compact(u), err: cmp.Or(a.err, b.err)}\n", "\t\t_, _ = u, cmp.Or(a.err, b.err)\n"),
 ("sampler log merge drops an unreadable list", "sampler.go", "err: cmp.Or(a.err, b.err)}", "err: cmp.Or(b.err, b.err)}"),
 ("power log unbounded", "sampler.go", "\tif len(l.power) > maxPower {", "\tif false {"),
 ("a list run that began before the span not seen in it", "sampler.go", "\t\tif !r.until.Before(from) && !r.at.After(to) {", "\t\tif !r.at.Before(from) && !r.at.After(to) {"),
 ("provisional figure not flagged", "rules.go", "\t\t\tif s.GPUProvisional {\n\t\t\t\tf.Provisional = true", "\t\t\tif false {\n\t\t\t\tf.Provisional = true"),
 ("provisional High without the ceiling since the last update", "gpu.go", "r.High += float64(ej-e0)/1000 + ceil*(since+2*g.poll).Seconds()", "r.High += float64(ej-e0) / 1000"),
 ("Settled gives End's figure", "span.go", "\tcase <-s.settle:\n\t\treturn s.settledFig, nil", "\tcase <-s.settle:\n\t\treturn s.fig, nil"),
 ("sub-period span split at idle power, not instant power", "gpu.go", "est := g.power(i, start, endT, limit, ceiling) * ours.Seconds()", "est := splitBracket(first, u0, align.at[i], begin.at, endT, idle, true)"),
 ("bracket splits not clamped to the board's ceiling", "gpu.go", "\treturn max(min(j, hi), min(lo, hi))", "\t_, _ = lo, hi\n\treturn j"),
 ("End's edge the end of a read after it", "gpu.go", "\ts.at = at // the span's edge, not when the reads returned\n", "\ts.at = g.now()\n"),
 ("an update during Begin's energy read not in High", "gpu.go", "r.High += float64(e3-e0)/1000 + lateB", "r.High += float64(e3-e0) / 1000"),
 ("overlapped spans settled (their End reads the counter)", "span.go", "r.Provisional && !in.Overlap", "r.Provisional"),
 ("split: prompt tokens weigh as completion tokens", "phase.go", "f = energy.SplitTokens(f, in.PromptTokens, in.CompletionTokens, in.PromptRatio)", "f = energy.SplitTokens(f, in.PromptTokens, in.CompletionTokens, 1)"),
]


def run(mut, tmp):
    name, f, old, new = mut
    src = open(f).read()
    if src.count(old) != 1:
        return "MISSING", f"pattern found {src.count(old)} times in {f}"
    d = tempfile.mkdtemp(dir=tmp)
    mutant = os.path.join(d, os.path.basename(f))  # f may lie outside meter/ (../energy/…)
    with open(mutant, "w") as out:
        out.write(src.replace(old, new))
    overlay = os.path.join(d, "overlay.json")
    with open(overlay, "w") as out:
        json.dump({"Replace": {os.path.abspath(f): mutant}}, out)
    r = subprocess.run(["go", "test", "-count=1", "-failfast", "-overlay", overlay, "."],
                       capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    fails = sorted({l.split()[2] for l in r.stdout.splitlines() if l.strip().startswith("--- FAIL")})
    if r.returncode == 0:
        return "MISSED", ""
    if "[build failed]" in out or "[setup failed]" in out:
        return "BUILD", ", ".join([l for l in out.splitlines() if ".go:" in l][:2])
    if not fails:  # a panic or a timeout fails the run without a --- FAIL line
        fails = [l for l in out.splitlines() if l.startswith("panic:") or "FAIL" in l][:2]
    return "CAUGHT", ", ".join(fails)


def main(argv):
    jobs = os.cpu_count() or 1
    if argv[:1] == ["-j"]:
        jobs, argv = int(argv[1]), argv[2:]
    chosen = [m for m in muts if not argv or any(o in m[0] for o in argv)]
    tally = {"CAUGHT": 0, "MISSED": 0, "BUILD": 0, "MISSING": 0}
    start = time.monotonic()
    # A mutant counts as caught only if the unmutated package passes: otherwise a failing or
    # flaky test would "catch" every mutant.
    base = subprocess.run(["go", "test", "-count=1", "."], capture_output=True, text=True, timeout=600)
    if base.returncode != 0:
        print("BASELINE the unmutated tests fail; no mutant can be judged:\n" + (base.stdout + base.stderr)[-2000:])
        return 1
    with tempfile.TemporaryDirectory(prefix="mutate-") as tmp, \
            concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for mut, (status, detail) in zip(chosen, pool.map(lambda m: run(m, tmp), chosen)):
            tally[status] += 1
            print(f"{status:8} {mut[0]}: {detail[:400]}", flush=True)
    print(" ".join(f"{k}={v}" for k, v in tally.items()), f"in {time.monotonic() - start:.0f}s")
    return 0 if tally["CAUGHT"] > 0 and tally["CAUGHT"] == sum(tally.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
