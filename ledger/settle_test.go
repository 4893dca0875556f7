package ledger

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// provisionalCall is rec(i) with a provisional GPU figure of 10 J, bounds 8..14.
func provisionalCall(i int) Record {
	r := rec(i)
	r.Stage, r.Model = "neural", "llama3.2:1b"
	r.Figure = energy.Figure{Joules: 10, Low: 8, High: 14, Grade: energy.Measured, Coverage: energy.CoverageWhole,
		Method: "rapl+nvml", Provisional: true}
	return r
}

// settlementOf is the settlement record of call (as written) with a settled figure of j joules,
// made later.
func settlementOf(call Record, j float64) Record {
	s := call
	s.Seq, s.Prev, s.Hash, s.Receipt = 0, "", "", ""
	s.Time = call.Time.Add(150 * time.Millisecond)
	s.Figure = energy.Figure{Joules: j, Low: j, High: j, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: "rapl+nvml"}
	s.Settles = call.Receipt
	return s
}

// settledLedger writes rec(1), a provisional call, rec(3), the call's settlement (12 J), and
// returns its path and the records as written.
func settledLedger(t *testing.T, key []byte) (string, []Record) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	l := open(t, Options{Path: path, HMACKey: key})
	var out []Record
	for _, r := range []Record{rec(1), provisionalCall(2), rec(3)} {
		w, err := l.Append(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, w)
	}
	w, err := l.Append(settlementOf(out[1], 12))
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, w)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path, out
}

// TestSettlementVerifies: a settlement chains after its call like any record; the call's record,
// and so the receipt the client got, stay as they were.
func TestSettlementVerifies(t *testing.T) {
	path, recs := settledLedger(t, nil)
	rep := mustVerify(t, Verifier{}, path)
	if rep.Records != 4 || rep.Settlements != 1 || rep.Unsettled != 0 {
		t.Fatalf("report %+v: want 4 records, 1 settlement, 0 unsettled", rep)
	}
	call, settled := recs[1], recs[3]
	client := energy.Receipt{Key: call.Key, Stage: call.Stage, Model: call.Model, Joules: 10, Grade: energy.Measured, Time: call.Time}.Hash()
	if call.Receipt != client || settled.Settles != client {
		t.Fatalf("call's receipt %s, settlement names %s; the client's is %s", call.Receipt, settled.Settles, client)
	}
	if settled.Receipt == client || settled.Joules != 12 || settled.Provisional {
		t.Fatalf("settlement %+v", settled)
	}
	line := bytes.Split(mustRead(t, path), []byte{'\n'})[3]
	if !bytes.Contains(line, []byte(`"settles":"`+client+`"`)) {
		t.Fatalf("settlement line %s", line)
	}
	// A call's record is written as before settlements existed: no settles field.
	if bytes.Contains(bytes.Split(mustRead(t, path), []byte{'\n'})[1], []byte("settles")) {
		t.Fatal("a call's record carries settles")
	}
}

// TestCrashBeforeSettlement: a provisional call whose settlement was never written (the process
// died between the two) still verifies, and is reported unsettled.
func TestCrashBeforeSettlement(t *testing.T) {
	path, _ := settledLedger(t, nil)
	lines := bytes.Split(bytes.TrimSpace(mustRead(t, path)), []byte{'\n'})
	writeLines(t, path, lines[:3])
	rep := mustVerify(t, Verifier{}, path)
	if rep.Records != 3 || rep.Settlements != 0 || rep.Unsettled != 1 {
		t.Fatalf("report %+v: want 3 records, 1 unsettled", rep)
	}
	tot, err := Sum(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := rec(1).Joules + 10 + rec(3).Joules; tot.Joules != want || tot.Records != 3 {
		t.Fatalf("sum %+v: want %v J over 3 records (the provisional figure stands)", tot.Total, want)
	}
	// And the ledger reopens and goes on after it.
	l := open(t, Options{Path: path})
	if _, err := l.Append(rec(4)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, Verifier{}, path)
}

// TestSettlementTampering: a settlement edited, forged, aimed at another request or repeated
// breaks the chain where it is.
func TestSettlementTampering(t *testing.T) {
	key := []byte("k3y")
	reseal := func(r *Record, key []byte) {
		r.Receipt = r.receipt().Hash()
		r.Hash = newSealer(key).seal(r)
	}
	for _, tc := range []struct {
		name     string
		key      []byte
		tamper   func(t *testing.T, lines [][]byte) [][]byte
		line     int
		contains string
	}{
		{
			name: "settled joules edited",
			tamper: func(t *testing.T, lines [][]byte) [][]byte {
				lines[3] = bytes.Replace(lines[3], []byte(`"joules":12`), []byte(`"joules":9`), 1)
				return lines
			},
			line: 4, contains: "hash mismatch",
		},
		{
			name: "settled joules edited, resealed, HMAC ledger",
			key:  key,
			tamper: func(t *testing.T, lines [][]byte) [][]byte {
				r := decode(t, lines[3])
				r.Joules, r.Low, r.High = 9, 9, 9
				reseal(&r, nil)
				lines[3] = encode(t, r)
				return lines
			},
			line: 4, contains: "HMAC mismatch",
		},
		{
			name: "settles a receipt no call has",
			tamper: func(t *testing.T, lines [][]byte) [][]byte {
				r := decode(t, lines[3])
				r.Settles = strings.Repeat("ab", 32)
				reseal(&r, nil)
				lines[3] = encode(t, r)
				return lines
			},
			line: 4, contains: "no provisional call",
		},
		{
			name: "settles another request's call",
			tamper: func(t *testing.T, lines [][]byte) [][]byte {
				r := decode(t, lines[3])
				r.RequestID = "req-other"
				reseal(&r, nil)
				lines[3] = encode(t, r)
				return lines
			},
			line: 4, contains: "not request req-other's",
		},
		{
			name: "settles a final call",
			tamper: func(t *testing.T, lines [][]byte) [][]byte {
				r := decode(t, lines[3])
				call := decode(t, lines[2])
				r.Settles, r.RequestID = call.Receipt, call.RequestID
				reseal(&r, nil)
				lines[3] = encode(t, r)
				return lines
			},
			line: 4, contains: "no provisional call",
		},
		{
			name: "settled twice",
			tamper: func(t *testing.T, lines [][]byte) [][]byte {
				r := decode(t, lines[3])
				r.Seq, r.Prev = r.Seq+1, r.Hash
				r.Time = r.Time.Add(time.Second)
				reseal(&r, nil)
				return append(lines, encode(t, r))
			},
			line: 5, contains: "settled already",
		},
		{
			name: "settlement before its call",
			tamper: func(t *testing.T, lines [][]byte) [][]byte {
				// The settlement moved to the head, the chain rebuilt by one who has no key.
				order := []Record{decode(t, lines[3]), decode(t, lines[0]), decode(t, lines[1]), decode(t, lines[2])}
				prev := ZeroHash
				for i := range order {
					order[i].Seq, order[i].Prev = uint64(i+1), prev
					order[i].Hash = newSealer(nil).seal(&order[i])
					prev = order[i].Hash
					lines[i] = encode(t, order[i])
				}
				return lines
			},
			line: 1, contains: "no provisional call",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, _ := settledLedger(t, tc.key)
			lines := bytes.Split(bytes.TrimSpace(mustRead(t, path)), []byte{'\n'})
			writeLines(t, path, tc.tamper(t, lines))
			rep, err := Verifier{HMACKey: tc.key}.Verify(path)
			if !errors.Is(err, ErrBroken) || rep.Broken == nil {
				t.Fatalf("verified: %+v", rep)
			}
			if rep.Broken.Line != tc.line || !strings.Contains(rep.Broken.Reason, tc.contains) {
				t.Fatalf("broken at line %d: %s; want line %d, %q", rep.Broken.Line, rep.Broken.Reason, tc.line, tc.contains)
			}
		})
	}
}

// TestSumCountsTheSettledFigureOnce: a settled call counts once, with its settled joules, in
// its own groups, even when the settlement falls on the next day.
func TestSumCountsTheSettledFigureOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	l := open(t, Options{Path: path})
	call := provisionalCall(2)
	call.Time = time.Date(2025, 3, 14, 23, 59, 59, 900_000_000, time.UTC)
	w, err := l.Append(call)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(rec(1)); err != nil {
		t.Fatal(err)
	}
	s := settlementOf(w, 12)
	s.Time = w.Time.Add(200 * time.Millisecond) // the next day
	if _, err := l.Append(s); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	tot, err := Sum(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := 12 + rec(1).Joules; tot.Records != 2 || tot.Joules != want {
		t.Fatalf("total %+v: want 2 records, %v J", tot.Total, want)
	}
	if d := tot.ByDay["2025-03-14"]; d.Records != 2 || d.Joules != 12+rec(1).Joules {
		t.Errorf("the call's day: %+v, want 2 records of %v J", d, 12+rec(1).Joules)
	}
	if d, ok := tot.ByDay["2025-03-15"]; ok && d.Joules != 0 {
		t.Errorf("the settlement's day got %+v", d)
	}
	if m := tot.ByModel[call.Model]; m.Records != 1 || m.Joules != 12 { // rec(1) is another model's
		t.Errorf("by model %+v", tot.ByModel)
	}

	// A settlement whose call is in files not given counts as that call.
	lines := bytes.Split(bytes.TrimSpace(mustRead(t, path)), []byte{'\n'})
	only := filepath.Join(t.TempDir(), "ledger.jsonl")
	writeLines(t, only, lines[2:])
	tot, err = Sum(only)
	if err != nil || tot.Records != 1 || tot.Joules != 12 {
		t.Fatalf("a lone settlement: %+v, %v", tot.Total, err)
	}
}

// TestPartialChainSettlement: in a chain verified from after genesis (older files archived), a
// settlement whose call is in the archived part is accepted, and the calls are still counted.
func TestPartialChainSettlement(t *testing.T) {
	path, _ := settledLedger(t, nil)
	lines := bytes.Split(bytes.TrimSpace(mustRead(t, path)), []byte{'\n'})
	writeLines(t, path, lines[2:])
	rep := mustVerify(t, Verifier{Partial: true}, path)
	if rep.Genesis || rep.Records != 2 || rep.Settlements != 1 {
		t.Fatalf("report %+v", rep)
	}
}

// TestSecondSettlement: a call settled twice breaks the chain even where its call is in the
// archived part (a partial chain), and Sum counts the call once.
func TestSecondSettlement(t *testing.T) {
	path, _ := settledLedger(t, nil)
	lines := bytes.Split(bytes.TrimSpace(mustRead(t, path)), []byte{'\n'})
	r := decode(t, lines[3])
	r.Seq, r.Prev = r.Seq+1, r.Hash
	r.Time = r.Time.Add(time.Second)
	r.Receipt = r.receipt().Hash()
	r.Hash = newSealer(nil).seal(&r)
	lines = append(lines, encode(t, r))
	writeLines(t, path, lines[2:]) // the call's own record archived away
	rep, err := Verifier{Partial: true}.Verify(path)
	if !errors.Is(err, ErrBroken) || rep.Broken == nil || rep.Broken.Line != 3 || !strings.Contains(rep.Broken.Reason, "settled already") {
		t.Fatalf("verified a second settlement in a partial chain: %+v, %v", rep, err)
	}
	writeLines(t, path, lines)
	tot, err := Sum(path)
	if want := rec(1).Joules + 12 + rec(3).Joules; err != nil || tot.Records != 3 || tot.Joules != want {
		t.Fatalf("sum %+v, %v: want 3 records, %v J", tot.Total, err, want)
	}
	writeLines(t, path, lines[2:])
	if tot, err := Sum(path); err != nil || tot.Records != 2 || tot.Joules != rec(3).Joules+12 {
		t.Fatalf("sum of a partial chain %+v, %v: the lone settlement counted twice", tot.Total, err)
	}
}
