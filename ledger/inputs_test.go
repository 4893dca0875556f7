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
		"low":    func(r *Record) { r.Low = 0.5 },
		"high":   func(r *Record) { r.High *= 2 },
		"split":  func(r *Record) { r.PromptJoules *= 2 },
		"inputs": func(r *Record) { r.Inputs = energy.ListOf(energy.Inputs{Kind: energy.KindStage, Version: energy.StageVersion, WallNS: 1}) },
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

func TestInputsNotFinite(t *testing.T) {
	l := open(t, Options{Path: filepath.Join(t.TempDir(), "ledger.jsonl")})
	r := withInputs(1)
	r.High = math.Inf(1)
	if _, err := l.Append(r); !errors.Is(err, ErrInvalid) {
		t.Errorf("infinite bound: %v", err)
	}
	r = withInputs(1)
	r.Inputs = energy.ListOf(energy.Inputs{Kind: energy.KindStage, Watts: math.NaN()})
	if _, err := l.Append(r); !errors.Is(err, ErrInvalid) {
		t.Errorf("NaN input: %v", err)
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
