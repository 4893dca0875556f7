package ledger

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// withInputs is rec(i) with bounds, a token split and recorded inputs.
func withInputs(i int) Record {
	r := rec(i)
	r.Figure = energy.SplitTokens(energy.StageModel(time.Duration(i+1)*time.Millisecond, 10, "in-process-stage"), 12, 3, 0.1)
	return r
}

// TestInputsRoundTrip: a record's bounds, split and inputs are written, read back byte for byte
// and covered by its hash; a record without them keeps its old line and hash.
func TestInputsRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	l := open(t, Options{Path: path})
	old, err := l.Append(rec(1))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(encode(t, old), []byte("inputs")) || bytes.Contains(encode(t, old), []byte("joules_low")) {
		t.Fatalf("a record without bounds or inputs writes them: %s", encode(t, old))
	}
	w, err := l.Append(withInputs(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, Verifier{}, path)
	lines := bytes.Split(bytes.TrimSpace(mustRead(t, path)), []byte{'\n'})
	got := decode(t, lines[1])
	if got.Inputs.Len() != 1 || got.Inputs.All()[0] != w.Inputs.All()[0] || got.Low != w.Low || got.High != w.High ||
		got.PromptJoules != w.PromptJoules || got.CompletionTokens != 3 {
		t.Fatalf("read back %+v, wrote %+v", got.Figure, w.Figure)
	}

	// Each is under the hash: an edit breaks the chain at that record.
	for name, edit := range map[string]func(*Record){
		"low":   func(r *Record) { r.Low = 0.5 },
		"high":  func(r *Record) { r.High *= 2 },
		"split": func(r *Record) { r.PromptJoules *= 2 },
		"inputs": func(r *Record) {
			r.Inputs = energy.ListOf(energy.Inputs{Kind: energy.KindStage, Version: energy.StageVersion, WallNS: 1})
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := decode(t, lines[1])
			edit(&r)
			p := filepath.Join(t.TempDir(), "ledger.jsonl")
			writeLines(t, p, [][]byte{lines[0], encode(t, r)})
			if _, err := (Verifier{}).Verify(p); !errors.Is(err, ErrBroken) {
				t.Fatalf("edited %s: verify = %v", name, err)
			}
		})
	}
}

// A figure whose bounds, split or inputs hold a number that is not finite is still recorded
// (never a lost record): its inputs are dropped (the figure as written no longer derives from them), its bounds clamped so Low ≤ Joules ≤ High,
// and the record verifies, read back as having no inputs.
func TestInputsNotFinite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	l := open(t, Options{Path: path})
	for name, edit := range map[string]func(*Record){
		"infinite high": func(r *Record) { r.High = math.Inf(1) },
		"nan low":       func(r *Record) { r.Low = math.NaN() },
		"nan split":     func(r *Record) { r.CompletionJoules = math.NaN() },
		"nan input": func(r *Record) {
			r.Inputs = energy.ListOf(energy.Inputs{Kind: energy.KindStage, Watts: math.NaN()})
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := withInputs(1)
			edit(&r)
			got, err := l.Append(r)
			if err != nil {
				t.Fatalf("Append: %v, want the record written", err)
			}
			if got.Receipt == "" || got.Joules != r.Joules {
				t.Errorf("receipt %q, joules %v (gave %v)", got.Receipt, got.Joules, r.Joules)
			}
			if !finite(got.Low) || !finite(got.High) || got.Low > got.Joules || got.Joules > got.High {
				t.Errorf("bounds [%v, %v] around %v", got.Low, got.High, got.Joules)
			}
			if !finite(got.PromptJoules) || !finite(got.CompletionJoules) {
				t.Errorf("split %v+%v", got.PromptJoules, got.CompletionJoules)
			}
			if got.Inputs.Len() != 0 {
				t.Errorf("%d inputs kept, want none (recompute: no inputs)", got.Inputs.Len())
			}
		})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, Verifier{}, path)
	lines := bytes.Split(bytes.TrimSpace(mustRead(t, path)), []byte{'\n'})
	if len(lines) != 4 {
		t.Fatalf("%d lines written, want 4", len(lines))
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
