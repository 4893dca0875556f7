package meter

import (
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// Reasons a figure's prompt/completion split could not use the phases, appended to
// energy.SplitTokenWeight after a ":" (for example "token-weight:phase-too-short").
const (
	// PhaseTooShort: a phase moved the tree's CPU clock by nothing.
	PhaseTooShort = "phase-too-short"
	// PhaseGPU: the figure has a GPU part, which is not read at the mark.
	PhaseGPU = "phase-gpu"
	// PhaseNoTree: the figure is not the tree's CPU time (a token model, a vanished process).
	PhaseNoTree = "phase-no-tree"
	// PhaseUnread: the mark could not read the tree's CPU time at the first chunk.
	PhaseUnread = "phase-unread"
)

// SplitPhases names a split made at a stream's first chunk: the figure shared between prefill
// (up to the first chunk) and decode in proportion to the tree's CPU time in each phase, as the
// edge book billed it.
const SplitPhases = "phases"

// Mark marks the end of the prefill phase: a stream's first chunk. It reads the backend tree's
// CPU time and books it in the edge book as any span edge, so that End can split the figure
// between the prompt and the completion by what the tree did before and after. Only the first
// call counts; a span with no tree to read, or on macOS, ignores it (its split says why).
func (s *Span) Mark() {
	if s.marked || s.ended {
		return
	}
	s.marked = true
	if s.c == nil || s.b == nil {
		return
	}
	s.b.edges.mu.Lock()
	defer s.b.edges.mu.Unlock()
	procs, cg, err := s.m.sampleTree(s.b, s.c.bufB[:0], false)
	if err != nil {
		return // no mark: End splits by token weight
	}
	s.m.bookMark(s.b, procs, cg, s.m.opts.now())
	s.markCPU, s.markOK = s.share.cpu, true
}

// bookMark books an edge at which no span joins or leaves. b.edges.mu is held.
func (m *Meter) bookMark(b *backendState, procs []procSample, cg uint64, now time.Time) {
	e := &b.edges
	m.bookInterval(b, procs, cg, now)
	e.last, e.lastCg, e.lastAt = append(e.last[:0], procs...), cg, now
}

// splitParts splits f between prompt and completion: by the phases when the span was marked
// and the figure is the tree's CPU time alone, else by token weight, saying why not.
func splitParts(f energy.Figure, in energy.Inputs) energy.Figure {
	f = energy.SplitTokens(f, in.PromptTokens, in.CompletionTokens, in.PromptRatio)
	if !in.Marked && !in.MarkUnread || f.Split == "" {
		return f
	}
	why := ""
	switch {
	case f.Method != MethodCPUTimeModel && f.Method != MethodCPUTimeShare && f.Method != MethodRAPL:
		why = PhaseNoTree
		if f.GPUJoules > 0 || in.GPUUsed {
			why = PhaseGPU
		}
	case in.MarkUnread:
		why = PhaseUnread
	case in.MarkCPUNS <= 0 || in.MarkCPUNS >= in.TreeCPUNS:
		why = PhaseTooShort
	}
	if why != "" {
		f.Split += ":" + why
		return f
	}
	f.PromptJoules = f.Joules * float64(in.MarkCPUNS) / float64(in.TreeCPUNS)
	f.CompletionJoules = f.Joules - f.PromptJoules
	f.Split = SplitPhases
	return f
}
