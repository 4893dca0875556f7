// Package graph is the cascade's knowledge-graph stage: single-hop factual questions answered
// from an in-memory triple store loaded from N-Triples and TSV files.
package graph

import (
	"context"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

var _ cascade.Stage = (*Stage)(nil)

// Estimator is this proxy's running cost of a model's calls (energy.Tracker is one): what writing
// an answer of completionTokens tokens would have cost, and a reason word that labels the figure
// (energy.SavedRunningMeasured, …); ok is false while it has no figure for the model.
type Estimator interface {
	Estimate(model string, completionTokens int) (joules float64, reason string, ok bool)
}

// Stage answers questions like "What is the capital of France?", "Which country has Paris as its
// capital?" or "Who wrote Hamlet?" from the loaded facts, and passes (cascade.ErrMiss) on
// anything else: several entities or relations (multi-hop), an ambiguous name, a word the
// question would need understood ("when", "not", "in 1700"), or a fact the graph lacks. It is
// safe for concurrent use; Reload swaps the whole graph atomically.
type Stage struct {
	files []string
	fsys  fs.FS
	saved float64
	est   Estimator

	g        atomic.Pointer[store]
	reloadMu sync.Mutex
}

// New loads o.Files. A file that is missing or malformed is an error naming its line. With no
// files the stage answers nothing.
func New(o Options) (*Stage, error) {
	s := &Stage{files: o.Files, fsys: o.FS, saved: o.SavedJoules, est: o.Estimator}
	if s.saved <= 0 {
		s.saved = DefaultSavedJoules
	}
	st, err := load(s.fsys, s.files)
	if err != nil {
		return nil, err
	}
	s.g.Store(st)
	return s, nil
}

// Reload reads the files again and swaps the new graph in only when it loaded cleanly; on error
// the stage keeps serving the old graph. Call it on SIGHUP; the caller logs the error, or the new
// size (Len).
func (s *Stage) Reload() error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	st, err := load(s.fsys, s.files)
	if err != nil {
		return err
	}
	s.g.Store(st)
	return nil
}

// Len is the number of facts loaded.
func (s *Stage) Len() int { return s.g.Load().triples }

// Name is "graph".
func (*Stage) Name() string { return "graph" }

// Serve answers a request that is one user question, optionally after a system message, for any
// model.
func (s *Stage) Serve(_ context.Context, req *cascade.Request, _ cascade.Sink) (*cascade.Answer, error) {
	if req.NoCache {
		return nil, cascade.ErrMiss
	}
	q, ok := question(&req.Chat)
	if !ok {
		return nil, cascade.ErrMiss
	}
	st := s.g.Load()
	var f fact
	if text, plain := cascade.PlainBytes(q.Content); plain {
		f, ok = answerText(st, text) // most questions: read in place, not copied
	} else {
		f, ok = st.answer(q.Text())
	}
	if !ok {
		return nil, cascade.ErrMiss
	}
	return s.reply(req, st.render(f)), nil
}

// question is the one user message of a request with at most one system message before it,
// asking for one plain text answer.
func question(c *cascade.ChatRequest) (*cascade.Message, bool) {
	msgs := c.Messages
	if len(msgs) == 2 && (msgs[0].Role == "system" || msgs[0].Role == "developer") {
		msgs = msgs[1:]
	}
	if len(msgs) != 1 || msgs[0].Role != "user" || len(c.Tools) > 0 || (c.N != nil && *c.N > 1) ||
		(c.ResponseFormat != nil && c.ResponseFormat.Type != "" && c.ResponseFormat.Type != "text") {
		return nil, false
	}
	for _, p := range msgs[0].Parts() {
		if p.Type != "text" {
			return nil, false
		}
	}
	return &msgs[0], true
}

// render states a fact with its predicate's template.
func (st *store) render(f fact) string {
	p := st.preds[f.pred]
	names := make([]string, len(f.values))
	for i, v := range f.values {
		names[i] = st.labels[v]
	}
	subj, obj := st.labels[f.node], list(names)
	tmpl := p.template
	if f.dir == inverse {
		subj, obj = obj, st.labels[f.node]
		if len(names) > 1 && p.manySubjects != "" {
			tmpl = p.manySubjects
		}
	} else if len(names) > 1 && p.manyObjects != "" {
		tmpl = p.manyObjects
	}
	if tmpl == "" {
		tmpl = "The {p} of {s} is {o}."
	}
	out := strings.NewReplacer("{s}", subj, "{o}", obj, "{p}", p.label).Replace(tmpl)
	if strings.HasSuffix(out, "..") && !strings.HasSuffix(out, "...") {
		out = out[:len(out)-1] // a name ending in "." (Washington, D.C.) ends the sentence
	}
	return out
}

// list joins names as "A", "A and B", "A, B and C".
func list(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// reply is the answer with what it saved: the running figure for the model asked, else the
// stated constant, labelled with the reason either way (a saving is never measured).
func (s *Stage) reply(req *cascade.Request, text string) *cascade.Answer {
	ans := cascade.TextAnswer(req, text, 0, s.saved)
	ans.Energy.Reason = energy.SavedStated
	if s.est != nil {
		if j, reason, ok := s.est.Estimate(req.Chat.Model, ans.Usage.CompletionTokens); ok && j > 0 {
			ans.Energy.Saved, ans.Energy.Reason = j, reason
		}
	}
	return ans
}
