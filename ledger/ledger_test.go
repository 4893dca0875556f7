package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/rs/zerolog"
)

var t0 = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// rec is the i-th test record, the fields a proxy would fill.
func rec(i int) Record {
	return Record{
		Time:      t0.Add(time.Duration(i) * time.Hour),
		RequestID: fmt.Sprintf("req-%d", i),
		KeyID:     []string{"", "team-a", "team-b"}[i%3],
		Key:       fmt.Sprintf("%064x", i),
		Model:     []string{"llama3.2:1b", "qwen2.5:0.5b"}[i%2],
		Stage:     []string{"cache", "neural"}[i%2],
		Backend:   "ollama",
		Status:    200,
		Figure: energy.Figure{
			Joules:   1.5 + float64(i),
			Grade:    "estimated",
			Coverage: "whole",
			Method:   "token-model",
			Reason:   "no counters",
		},
	}
}

func open(t testing.TB, o Options) *Ledger {
	t.Helper()
	l, err := Open(o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// fill appends records from..to-1.
func fill(t testing.TB, l *Ledger, from, to int) []Record {
	t.Helper()
	var out []Record
	for i := from; i < to; i++ {
		r, err := l.Append(rec(i))
		if err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		out = append(out, r)
	}
	return out
}

// files returns the ledger's files in the directory, as an operator's glob would.
func files(t testing.TB, path string) []string {
	t.Helper()
	m, err := filepath.Glob(path + "*")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustVerify(t testing.TB, v Verifier, files ...string) Report {
	t.Helper()
	rep, err := v.Verify(files...)
	if err != nil {
		t.Fatalf("Verify: %v (report %+v)", err, rep)
	}
	return rep
}

func TestAppendChains(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	l := open(t, Options{Path: path})
	got := fill(t, l, 0, 3)
	for i, r := range got {
		if r.Seq != uint64(i+1) {
			t.Errorf("record %d: seq %d", i, r.Seq)
		}
		want := ZeroHash
		if i > 0 {
			want = got[i-1].Hash
		}
		if r.Prev != want {
			t.Errorf("record %d: prev %s, want %s", i, r.Prev, want)
		}
		if len(r.Hash) != 64 || r.Hash == ZeroHash {
			t.Errorf("record %d: hash %q", i, r.Hash)
		}
	}
	if seq, h := l.Head(); seq != 3 || h != got[2].Hash {
		t.Errorf("Head = %d %s", seq, h)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep := mustVerify(t, Verifier{}, path)
	if rep.Records != 3 || rep.FirstSeq != 1 || rep.LastSeq != 3 || !rep.Genesis || rep.LastHash != got[2].Hash {
		t.Errorf("report %+v", rep)
	}
}

// The record's receipt is the X-EOC-Receipt the proxy computes from time.Now() in any zone.
func TestReceiptMatchesHeader(t *testing.T) {
	l := open(t, Options{Path: filepath.Join(t.TempDir(), "l.jsonl")})
	now := time.Now().In(time.FixedZone("CEST", 2*3600)) // with a monotonic reading and a zone
	header := energy.Receipt{Key: "k", Stage: "neural", Model: "m", Joules: 0.1 + 0.2, Grade: "measured", Time: now}.Hash()
	r, err := l.Append(Record{Time: now, Key: "k", Stage: "neural", Model: "m", Figure: energy.Figure{Joules: 0.1 + 0.2, Grade: "measured"}, Receipt: header})
	if err != nil {
		t.Fatal(err)
	}
	if r.Receipt != header {
		t.Errorf("receipt %s, header %s", r.Receipt, header)
	}
	if r.Time.Location() != time.UTC {
		t.Errorf("time %v not in UTC", r.Time)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, Verifier{}, l.Path())
}

func TestAppendInvalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.jsonl")
	l := open(t, Options{Path: path})
	fill(t, l, 0, 1)
	for _, tc := range []struct {
		name string
		edit func(*Record)
	}{
		{"nan joules", func(r *Record) { r.Joules = math.NaN() }},
		{"inf saved", func(r *Record) { r.Saved = math.Inf(1) }},
		{"receipt of other fields", func(r *Record) { r.Receipt = strings.Repeat("ab", 32) }},
		{"year 10000", func(r *Record) { r.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rec(1)
			tc.edit(&r)
			if _, err := l.Append(r); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Append: %v, want ErrInvalid", err)
			}
		})
	}
	r, err := l.Append(rec(1))
	if err != nil || r.Seq != 2 {
		t.Fatalf("after rejects: seq %d, %v", r.Seq, err)
	}
	// Invalid UTF-8 is made valid before hashing, as JSON will carry it.
	bad := rec(2)
	bad.Model = "llama\xff"
	if _, err := l.Append(bad); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, Verifier{}, path)
}

func TestNilLedger(t *testing.T) {
	l, err := Open(Options{})
	if err != nil || l != nil {
		t.Fatalf("Open(\"\") = %v, %v; want nil, nil", l, err)
	}
	r, err := l.Append(rec(0))
	if err != nil || r.Seq != 0 || r.Hash != "" || r.Receipt != rec(0).receipt().Hash() {
		t.Fatalf("nil Append = %+v, %v", r, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if seq, h := l.Head(); seq != 0 || h != ZeroHash {
		t.Errorf("nil Head = %d %s", seq, h)
	}
}

func TestOpenOptions(t *testing.T) {
	if _, err := Open(Options{Path: filepath.Join(t.TempDir(), "l"), Fsync: "sometimes"}); err == nil {
		t.Error("fsync sometimes accepted")
	}
	// A missing directory is created.
	path := filepath.Join(t.TempDir(), "a", "b", "l.jsonl")
	l := open(t, Options{Path: path})
	fill(t, l, 0, 1)
}

func TestClosed(t *testing.T) {
	l := open(t, Options{Path: filepath.Join(t.TempDir(), "l.jsonl"), Fsync: FsyncBatch})
	fill(t, l, 0, 1)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(rec(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.jsonl")
	l := open(t, Options{Path: path})
	switch l2, err := Open(Options{Path: path}); {
	case err == nil:
		_ = l2.Close()
		t.Skip("no flock here")
	case !errors.Is(err, ErrLocked):
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	open(t, Options{Path: path}) // released by Close
}

func TestRestart(t *testing.T) {
	for _, fsync := range []string{FsyncEvery, FsyncBatch} {
		t.Run(fsync, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "l.jsonl")
			for run := range 3 {
				l := open(t, Options{Path: path, Fsync: fsync})
				if seq, _ := l.Head(); seq != uint64(run*4) {
					t.Fatalf("run %d: reopened at seq %d", run, seq)
				}
				got := fill(t, l, run*4, run*4+4)
				if got[0].Seq != uint64(run*4+1) {
					t.Fatalf("run %d: first seq %d", run, got[0].Seq)
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			}
			rep := mustVerify(t, Verifier{}, path)
			if rep.Records != 12 || rep.LastSeq != 12 {
				t.Errorf("report %+v", rep)
			}
		})
	}
}

func TestHMAC(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.jsonl")
	key := []byte("a very secret ledger key")
	l := open(t, Options{Path: path, HMACKey: key})
	fill(t, l, 0, 4)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if rep := mustVerify(t, Verifier{HMACKey: key}, path); !rep.HMAC || rep.Records != 4 {
		t.Errorf("report %+v", rep)
	}
	for _, tc := range []struct {
		name string
		key  []byte
	}{{"no key", nil}, {"wrong key", []byte("guess")}} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := Verifier{HMACKey: tc.key}.Verify(path)
			if !errors.Is(err, ErrBroken) || rep.Broken.Line != 1 || !strings.Contains(rep.Broken.Reason, "mismatch") {
				t.Fatalf("Verify = %v, %+v", err, rep.Broken)
			}
		})
	}
}

// ledgerLines writes n records and returns the file's lines.
func ledgerLines(t *testing.T, key []byte, n int) (string, [][]byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "l.jsonl")
	l := open(t, Options{Path: path, HMACKey: key})
	fill(t, l, 0, n)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, bytes.SplitAfter(bytes.TrimSuffix(b, []byte{'\n'}), []byte{'\n'})
}

func writeLines(t *testing.T, path string, lines [][]byte) {
	t.Helper()
	var b []byte
	for _, l := range lines {
		b = append(b, bytes.TrimSuffix(l, []byte{'\n'})...)
		b = append(b, '\n')
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func decode(t *testing.T, line []byte) Record {
	t.Helper()
	r, err := decodeLine(bytes.TrimSuffix(line, []byte{'\n'}))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func encode(t *testing.T, r Record) []byte {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// forge builds a record that chains after prev, hashed with key (nil: plain SHA-256), as an
// attacker who knows the format would.
func forge(t *testing.T, prev Record, key []byte) []byte {
	r := rec(99)
	if err := normalize(&r, time.Now); err != nil {
		t.Fatal(err)
	}
	r.Seq, r.Prev = prev.Seq+1, prev.Hash
	r.Hash = newSealer(key).seal(&r)
	return encode(t, r)
}

// Each tampering is caught, at the line where it happened (or the first line it breaks).
func TestVerifyTampering(t *testing.T) {
	key := []byte("k3y")
	for _, tc := range []struct {
		name     string
		key      []byte
		tamper   func(t *testing.T, lines [][]byte, key []byte) [][]byte
		line     int
		seq      uint64
		contains string
	}{
		{
			name: "edited joules",
			tamper: func(t *testing.T, lines [][]byte, _ []byte) [][]byte {
				lines[3] = bytes.Replace(lines[3], []byte(`"joules":4.5`), []byte(`"joules":0.5`), 1)
				return lines
			},
			line: 4, seq: 4, contains: "hash mismatch",
		},
		{
			name: "edited joules, hash recomputed without a key",
			tamper: func(t *testing.T, lines [][]byte, _ []byte) [][]byte {
				r := decode(t, lines[3])
				r.Joules = 0.5
				r.Receipt = r.receipt().Hash()
				r.Hash = newSealer(nil).seal(&r)
				lines[3] = encode(t, r)
				return lines
			},
			line: 5, seq: 5, contains: "prev",
		},
		{
			name: "edited joules, hash recomputed, HMAC ledger",
			key:  key,
			tamper: func(t *testing.T, lines [][]byte, _ []byte) [][]byte {
				r := decode(t, lines[3])
				r.Joules = 0.5
				r.Receipt = r.receipt().Hash()
				r.Hash = newSealer(nil).seal(&r)
				lines[3] = encode(t, r)
				return lines
			},
			line: 4, seq: 4, contains: "HMAC mismatch",
		},
		{
			name: "edited receipt, hash recomputed",
			tamper: func(t *testing.T, lines [][]byte, _ []byte) [][]byte {
				r := decode(t, lines[2])
				r.Receipt = strings.Repeat("0", 64)
				r.Hash = newSealer(nil).seal(&r)
				lines[2] = encode(t, r)
				return lines
			},
			line: 3, seq: 3, contains: "receipt",
		},
		{
			name: "removed from the middle",
			tamper: func(t *testing.T, lines [][]byte, _ []byte) [][]byte {
				return append(lines[:2:2], lines[3:]...)
			},
			line: 3, seq: 4, contains: "seq follows 2",
		},
		{
			name: "removed from the head",
			tamper: func(t *testing.T, lines [][]byte, _ []byte) [][]byte {
				return lines[1:]
			},
			line: 1, seq: 2, contains: "genesis",
		},
		{
			name: "reordered",
			tamper: func(t *testing.T, lines [][]byte, _ []byte) [][]byte {
				lines[2], lines[3] = lines[3], lines[2]
				return lines
			},
			line: 3, seq: 4, contains: "seq follows 2",
		},
		{
			name: "inserted, forged without a key",
			tamper: func(t *testing.T, lines [][]byte, _ []byte) [][]byte {
				f := forge(t, decode(t, lines[2]), nil)
				return append(lines[:3:3], append([][]byte{f}, lines[3:]...)...)
			},
			line: 5, seq: 4, contains: "seq follows 4",
		},
		{
			name: "inserted, forged without the key, HMAC ledger",
			key:  key,
			tamper: func(t *testing.T, lines [][]byte, _ []byte) [][]byte {
				f := forge(t, decode(t, lines[2]), []byte("not the key"))
				return append(lines[:3:3], append([][]byte{f}, lines[3:]...)...)
			},
			line: 4, seq: 4, contains: "HMAC mismatch",
		},
		{
			name: "inserted, forged with plain SHA-256, HMAC ledger",
			key:  key,
			tamper: func(t *testing.T, lines [][]byte, _ []byte) [][]byte {
				f := forge(t, decode(t, lines[5]), nil)
				return append(lines, f)
			},
			line: 7, seq: 7, contains: "HMAC mismatch",
		},
		{
			name: "appended, forged with the key: only the chain's head can tell",
			key:  key,
			tamper: func(t *testing.T, lines [][]byte, key []byte) [][]byte {
				return append(lines, forge(t, decode(t, lines[5]), key))
			},
		},
		{
			name: "field spelled another way",
			tamper: func(t *testing.T, lines [][]byte, _ []byte) [][]byte {
				lines[1] = bytes.Replace(lines[1], []byte(`"joules":2.5,`), []byte(`"joules":2.5,"Joules":2.5,`), 1)
				return lines
			},
			line: 2, seq: 2, contains: "canonical",
		},
		{
			name: "whitespace added",
			tamper: func(t *testing.T, lines [][]byte, _ []byte) [][]byte {
				lines[0] = bytes.Replace(lines[0], []byte(`,`), []byte(`, `), 1)
				return lines
			},
			line: 1, seq: 1, contains: "canonical",
		},
		{
			name: "garbage line",
			tamper: func(t *testing.T, lines [][]byte, _ []byte) [][]byte {
				lines[4] = []byte("hello\n")
				return lines
			},
			line: 5, contains: "not a record",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, lines := ledgerLines(t, tc.key, 6)
			mustVerify(t, Verifier{HMACKey: tc.key}, path) // pristine
			writeLines(t, path, tc.tamper(t, lines, tc.key))
			rep, err := Verifier{HMACKey: tc.key}.Verify(path)
			if tc.line == 0 {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if rep.LastSeq != 7 {
					t.Fatalf("report %+v", rep)
				}
				return
			}
			var b *Break
			if !errors.As(err, &b) || !errors.Is(err, ErrBroken) {
				t.Fatalf("Verify = %v, want a *Break", err)
			}
			if b != rep.Broken || b.File != path || b.Line != tc.line || b.Seq != tc.seq || !strings.Contains(b.Reason, tc.contains) {
				t.Fatalf("Break = %+v; want line %d seq %d, reason with %q", b, tc.line, tc.seq, tc.contains)
			}
		})
	}
}

func logTo(buf *bytes.Buffer) zerolog.Logger { return zerolog.New(buf) }

// A crash mid-write leaves a torn line: Verify reports it, Open sets it aside, the chain goes on.
func TestCrashMidWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		torn func(line []byte) []byte
	}{
		{"half a record", func(line []byte) []byte { return line[:len(line)/2] }},
		{"one byte", func(line []byte) []byte { return line[:1] }},
		{"zeros from a lost page", func(line []byte) []byte { return make([]byte, 4096) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "l.jsonl")
			l := open(t, Options{Path: path})
			fill(t, l, 0, 5)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			good, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			next := forge(t, decode(t, bytes.SplitAfter(good, []byte{'\n'})[4]), nil)
			torn := tc.torn(next)
			if err := os.WriteFile(path, append(good, torn...), 0o600); err != nil {
				t.Fatal(err)
			}

			rep := mustVerify(t, Verifier{}, path)
			if rep.Torn == nil || rep.Torn.Offset != int64(len(good)) || rep.Torn.Bytes != int64(len(torn)) || rep.Torn.Line != 6 || rep.Records != 5 {
				t.Fatalf("before recovery: torn %+v, report %+v", rep.Torn, rep)
			}

			var log bytes.Buffer
			l = open(t, Options{Path: path, Logger: logTo(&log)})
			rc := l.Recovered()
			if rc == nil || rc.Offset != int64(len(good)) || rc.Bytes != int64(len(torn)) || rc.Salvaged {
				t.Fatalf("Recovered = %+v", rc)
			}
			if aside, err := os.ReadFile(rc.SavedTo); err != nil || !bytes.Equal(aside, torn) {
				t.Fatalf("set aside %q: %q, %v", rc.SavedTo, aside, err)
			}
			if !strings.Contains(log.String(), `"level":"warn"`) || !strings.Contains(log.String(), fmt.Sprintf(`"offset":%d`, len(good))) {
				t.Errorf("no warning with the offset: %s", log.String())
			}
			got := fill(t, l, 5, 8)
			if got[0].Seq != 6 {
				t.Fatalf("continued at seq %d", got[0].Seq)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			rep = mustVerify(t, Verifier{}, files(t, path)...)
			if rep.Records != 8 || rep.Torn != nil || len(rep.SetAside) != 1 || rep.SetAside[0] != rc.SavedTo {
				t.Fatalf("after recovery: %+v", rep)
			}
		})
	}
}

// A whole record that only lacks its newline is kept, not set aside.
func TestCrashBeforeNewline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.jsonl")
	l := open(t, Options{Path: path})
	fill(t, l, 0, 3)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)-1], 0o600); err != nil {
		t.Fatal(err)
	}
	l = open(t, Options{Path: path})
	if rc := l.Recovered(); rc == nil || !rc.Salvaged {
		t.Fatalf("Recovered = %+v", rc)
	}
	if seq, _ := l.Head(); seq != 3 {
		t.Fatalf("head seq %d", seq)
	}
	fill(t, l, 3, 4)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if rep := mustVerify(t, Verifier{}, files(t, path)...); rep.Records != 4 || len(rep.SetAside) != 0 {
		t.Fatalf("report %+v", rep)
	}
}

// A last whole line that is not a record is not a crash: Open refuses to chain after it.
func TestOpenCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.jsonl")
	l := open(t, Options{Path: path})
	fill(t, l, 0, 2)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("{\"seq\":3}\n"); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if l, err := Open(Options{Path: path}); !errors.Is(err, ErrCorrupt) {
		_ = l.Close()
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
}

func TestRotation(t *testing.T) {
	for _, fsync := range []string{FsyncEvery, FsyncBatch} {
		t.Run(fsync, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "l.jsonl")
			o := Options{Path: path, Fsync: fsync, MaxBytes: 2000, HMACKey: []byte("k")}
			l := open(t, o)
			fill(t, l, 0, 40)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			fs := files(t, path)
			if len(fs) < 4 {
				t.Fatalf("only %d files: %v", len(fs), fs)
			}
			chain, _ := Order(fs)
			if chain[len(chain)-1] != path {
				t.Fatalf("active file not last: %v", chain)
			}
			// Each file starts where the one before ended.
			var last Record
			for i, f := range chain {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if len(b) == 0 {
					continue
				}
				lines := bytes.SplitAfter(bytes.TrimSuffix(b, []byte{'\n'}), []byte{'\n'})
				first := decode(t, lines[0])
				if i > 0 && (first.Prev != last.Hash || first.Seq != last.Seq+1) {
					t.Fatalf("%s starts at seq %d prev %s; previous file ended at %d %s", f, first.Seq, first.Prev, last.Seq, last.Hash)
				}
				if i < len(chain)-1 && int64(len(b)) < o.MaxBytes {
					t.Errorf("%s rotated at %d bytes", f, len(b))
				}
				last = decode(t, lines[len(lines)-1])
			}
			rep := mustVerify(t, Verifier{HMACKey: o.HMACKey}, fs...)
			if rep.Records != 40 || !rep.Genesis {
				t.Fatalf("report %+v", rep)
			}

			// The newest files alone are a suffix: refused unless partial.
			suffix := chain[len(chain)-2:]
			if _, err := (Verifier{HMACKey: o.HMACKey}).Verify(suffix...); !errors.Is(err, ErrBroken) {
				t.Fatalf("suffix verified without Partial: %v", err)
			}
			if rep := mustVerify(t, Verifier{HMACKey: o.HMACKey, Partial: true}, suffix...); rep.Genesis || rep.LastSeq != 40 {
				t.Fatalf("partial report %+v", rep)
			}
			// A rotated file missing from the middle breaks the chain.
			if _, err := (Verifier{HMACKey: o.HMACKey}).Verify(append(chain[:1:1], chain[2:]...)...); !errors.Is(err, ErrBroken) {
				t.Fatalf("gap verified: %v", err)
			}
		})
	}
}

// A restart right after a rotation (an empty active file), or after a crash between the rename
// and the new file, continues the rotated file's chain.
func TestRestartAfterRotation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove bool
	}{{"empty active file", false}, {"active file missing", true}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "l.jsonl")
			o := Options{Path: path, MaxBytes: 1}
			l := open(t, o)
			fill(t, l, 0, 3) // every append rotates
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if tc.remove {
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			}
			l = open(t, Options{Path: path})
			if seq, _ := l.Head(); seq != 3 {
				t.Fatalf("reopened at seq %d", seq)
			}
			fill(t, l, 3, 5)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if rep := mustVerify(t, Verifier{}, files(t, path)...); rep.Records != 5 {
				t.Fatalf("report %+v", rep)
			}
		})
	}
}

func TestConcurrentAppends(t *testing.T) {
	for _, tc := range []struct {
		fsync    string
		maxBytes int64
	}{{FsyncEvery, 0}, {FsyncBatch, 0}, {FsyncEvery, 16 << 10}, {FsyncBatch, 16 << 10}} {
		t.Run(fmt.Sprintf("%s/max=%d", tc.fsync, tc.maxBytes), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "l.jsonl")
			l := open(t, Options{Path: path, Fsync: tc.fsync, MaxBytes: tc.maxBytes, BatchInterval: time.Millisecond})
			const goroutines, each = 200, 3
			var wg sync.WaitGroup
			seqs := make(chan uint64, goroutines*each)
			for g := range goroutines {
				wg.Go(func() {
					for i := range each {
						r, err := l.Append(rec(g*each + i))
						if err != nil {
							t.Error(err)
							return
						}
						seqs <- r.Seq
					}
				})
			}
			wg.Wait()
			close(seqs)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			var got []uint64
			for s := range seqs {
				got = append(got, s)
			}
			sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
			for i, s := range got {
				if s != uint64(i+1) {
					t.Fatalf("seqs %v...: %d at %d", got[:min(len(got), 10)], s, i)
				}
			}
			rep := mustVerify(t, Verifier{}, files(t, path)...)
			if rep.Records != goroutines*each || len(got) != goroutines*each {
				t.Fatalf("%d records verified, %d appended, want %d", rep.Records, len(got), goroutines*each)
			}
			sum, err := Sum(files(t, path)...)
			if err != nil {
				t.Fatal(err)
			}
			if sum.Records != goroutines*each {
				t.Fatalf("Sum counted %d", sum.Records)
			}
		})
	}
}

func TestSum(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.jsonl")
	l := open(t, Options{Path: path, MaxBytes: 1500})
	for i := range 30 {
		r := rec(i)
		r.Joules, r.Saved = 1, float64(i%2)
		if _, err := l.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	sum, err := Sum(files(t, path)...)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Records != 30 || sum.Joules != 30 || sum.JoulesSaved != 15 {
		t.Errorf("total %+v", sum.Total)
	}
	for _, tc := range []struct {
		by   string
		want []Row
	}{
		{"key", []Row{{"", Total{10, 10, 5}}, {"team-a", Total{10, 10, 5}}, {"team-b", Total{10, 10, 5}}}},
		{"model", []Row{{"llama3.2:1b", Total{15, 15, 0}}, {"qwen2.5:0.5b", Total{15, 15, 15}}}},
		{"stage", []Row{{"cache", Total{15, 15, 0}}, {"neural", Total{15, 15, 15}}}},
		// t0 is 15:09 UTC; a record an hour: 9 on the first day, 24 on the next, 0 of the rest.
		{"day", []Row{{"2025-03-14", Total{9, 9, 4}}, {"2025-03-15", Total{21, 21, 11}}}},
	} {
		t.Run(tc.by, func(t *testing.T) {
			rows, err := sum.Group(tc.by)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(rows) != fmt.Sprint(tc.want) {
				t.Errorf("Group(%s) = %v, want %v", tc.by, rows, tc.want)
			}
		})
	}
	if _, err := sum.Group("color"); err == nil {
		t.Error("Group(color) accepted")
	}
}

func TestOrder(t *testing.T) {
	for _, tc := range []struct {
		name            string
		in, chain, side []string
	}{
		{
			name:  "active last, rotated by seq",
			in:    []string{"d/l.jsonl", "d/l.jsonl.20250102T000000Z.000000000200", "d/l.jsonl.20250101T000000Z.000000000100"},
			chain: []string{"d/l.jsonl.20250101T000000Z.000000000100", "d/l.jsonl.20250102T000000Z.000000000200", "d/l.jsonl"},
		},
		{
			name:  "seq wins over a clock that stepped back",
			in:    []string{"l.20250102T000000Z.000000000100", "l.20250101T000000Z.000000000200", "l"},
			chain: []string{"l.20250102T000000Z.000000000100", "l.20250101T000000Z.000000000200", "l"},
		},
		{
			name:  "torn files apart, duplicates dropped",
			in:    []string{"l", "l.20250101T000000Z.812.torn", "./l"},
			chain: []string{"l"},
			side:  []string{"l.20250101T000000Z.812.torn"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chain, side := Order(tc.in)
			if fmt.Sprint(chain) != fmt.Sprint(tc.chain) || fmt.Sprint(side) != fmt.Sprint(tc.side) {
				t.Errorf("Order = %v %v, want %v %v", chain, side, tc.chain, tc.side)
			}
		})
	}
}

// FuzzVerifyByteFlip: changing any one byte of a ledger never goes unnoticed. Either Verify
// fails, or the change tore the last line (reported as Torn: the cut-off-the-end case that only
// a head kept elsewhere can catch).
func FuzzVerifyByteFlip(f *testing.F) {
	dir := f.TempDir()
	path := filepath.Join(dir, "l.jsonl")
	l, err := Open(Options{Path: path})
	if err != nil {
		f.Fatal(err)
	}
	for i := range 4 {
		if _, err := l.Append(rec(i)); err != nil {
			f.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		f.Fatal(err)
	}
	orig, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	for _, pos := range []uint{0, 10, 100, 200, uint(len(orig) - 2), uint(len(orig) - 1)} {
		f.Add(pos, byte('1'))
		f.Add(pos, byte('\n'))
	}
	f.Fuzz(func(t *testing.T, pos uint, b byte) {
		data := bytes.Clone(orig)
		i := int(pos % uint(len(data)))
		if data[i] == b {
			return
		}
		data[i] = b
		p := filepath.Join(t.TempDir(), "l.jsonl")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := Verify(p)
		if err == nil && rep.Torn == nil {
			t.Fatalf("byte %d set to %q verified: %+v", i, b, rep)
		}
	})
}

// Reopening with another HMAC key (or none) is allowed but warned about: the chain will not
// verify under one key across that point.
func TestKeyChangeWarns(t *testing.T) {
	for _, tc := range []struct {
		name       string
		from, to   []byte
		wantWarned bool
	}{
		{"same key", []byte("a"), []byte("a"), false},
		{"key lost", []byte("a"), nil, true},
		{"key changed", []byte("a"), []byte("b"), true},
		{"key added", nil, []byte("b"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "l.jsonl")
			l := open(t, Options{Path: path, HMACKey: tc.from, MaxBytes: 1}) // the head is in a rotated file
			fill(t, l, 0, 2)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			open(t, Options{Path: path, HMACKey: tc.to, Logger: logTo(&log)})
			if warned := strings.Contains(log.String(), "HMAC key"); warned != tc.wantWarned {
				t.Errorf("warned %v: %s", warned, log.String())
			}
		})
	}
}

// TestAttempts: a record lists its backend attempts; they are covered by the hash, and a record
// without attempts keeps the canonical form records had before attempts were recorded.
func TestAttempts(t *testing.T) {
	plain := rec(1)
	var before []byte
	before = plain.canonical(before)
	if bytes.Contains(before, []byte("attempt")) {
		t.Fatalf("a record without attempts has them in its canonical form:\n%s", before)
	}

	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	l := open(t, Options{Path: path})
	r := rec(1)
	r.Attempts = []Attempt{{Backend: "first", Outcome: "status", Status: 503, Joules: 0.25, Grade: "measured"},
		{Backend: "second", Outcome: "ok", Status: 200, Joules: 2.25, Grade: "estimated"}}
	if _, err := l.Append(r); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(rec(2)); err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
	mustVerify(t, Verifier{}, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if got := decode(t, lines[0]); len(got.Attempts) != 2 || got.Attempts[0] != r.Attempts[0] {
		t.Fatalf("attempts read back: %+v", got.Attempts)
	}
	if bytes.Contains(lines[1], []byte(`"attempts"`)) {
		t.Fatalf("a record without attempts carries the field: %s", lines[1])
	}
	// The attempts are covered by the hash: the failed attempt's joules cannot be edited away.
	lines[0] = bytes.Replace(lines[0], []byte(`"joules":0.25`), []byte(`"joules":0`), 1)
	writeLines(t, path, lines)
	if _, err := (Verifier{}).Verify(path); err == nil {
		t.Fatal("an edited attempt verified")
	}
}
