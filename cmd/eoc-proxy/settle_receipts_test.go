package main

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/ledger"
)

// TestReceiptsSettlement: receipts verify and recompute check a provisional call's record and
// its settlement, both re-derived from their inputs; recompute fails a settled figure outside
// the provisional bounds.
func TestReceiptsSettlement(t *testing.T) {
	for _, tc := range []struct {
		name    string
		settled time.Duration // the settled figure: the stage model over this much time, at 10 W
		ok      bool
	}{
		{"inside the bounds", 12 * time.Millisecond, true},
		{"outside the bounds", 200 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.jsonl")
			l, err := ledger.Open(ledger.Options{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			// The provisional figure: 0.1 J with bounds 0..0.2 J (the stage model's), marked so.
			prov := energy.StageModel(10*time.Millisecond, 10, "in-process-stage")
			prov.Provisional = true
			call, err := l.Append(ledger.Record{RequestID: "req_1", Key: strings.Repeat("a", 64), Model: "m", Stage: "neural",
				Backend: "gpu", Status: 200, Figure: prov})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Append(ledger.Record{Time: call.Time.Add(120 * time.Millisecond), RequestID: "req_1", Key: call.Key,
				Model: "m", Stage: "neural", Backend: "gpu", Status: 200, Settles: call.Receipt,
				Figure: energy.StageModel(tc.settled, 10, "in-process-stage")}); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := runReceipts([]string{"verify", path}, &out); err != nil || !strings.Contains(out.String(), "settlements: 1 ") {
				t.Fatalf("verify: %v\n%s", err, out.String())
			}
			out.Reset()
			err = runReceipts([]string{"recompute", path}, &out)
			if tc.ok {
				if err != nil || !strings.Contains(out.String(), "2 record(s) re-derived") {
					t.Fatalf("recompute: %v\n%s", err, out.String())
				}
				return
			}
			if !errors.Is(err, errRecompute) || !strings.Contains(out.String(), "outside the provisional figure's bounds") {
				t.Fatalf("recompute of a settled figure outside the bounds: %v\n%s", err, out.String())
			}
		})
	}
}
