package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/eoc-proxy/eoc-proxy/ledger"
	"github.com/eoc-proxy/eoc-proxy/meter"
)

// errRecompute says a record's figure is not what its inputs give.
var errRecompute = errors.New("recompute: figures disagree with their inputs")

// receiptsRecompute derives every record's figure again from its recorded inputs
// (meter.Recompute) and fails naming each record where they disagree, or that cannot be
// derived by this build (inputs of other constants). A record without inputs (written before
// they were kept) is counted, not failed: there is nothing to re-derive it from. A settlement
// record is re-derived like any other, and its settled joules must also lie within the bounds
// of the provisional figure it settles (when that call's record is among the files).
func receiptsRecompute(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("receipts recompute", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("recompute: no files\n%s", receiptsUsage)
	}
	out := &printer{w: stdout}
	var ok, noInputs, bad int
	bounds := map[string][2]float64{} // provisional calls' receipts → their Low and High
	torn, err := ledger.Each(fs.Args(), func(file string, line int, r ledger.Record) error {
		if r.Settles == "" && r.Provisional {
			bounds[r.Receipt] = [2]float64{r.Low, r.High}
		}
		if b, found := bounds[r.Settles]; found && r.Settles != "" {
			delete(bounds, r.Settles)
			if r.Joules < b[0] || r.Joules > b[1] {
				bad++
				out.printf("DISAGREES: %s:%d: seq %d request %s: settled %v J is outside the provisional figure's bounds [%v, %v]\n",
					file, line, r.Seq, r.RequestID, r.Joules, b[0], b[1])
			}
		}
		derived, err := meter.Recompute(r.Figure)
		var why string
		switch {
		case errors.Is(err, meter.ErrNoInputs):
			noInputs++
			return nil
		case err != nil:
			why = "cannot re-derive: " + err.Error()
		default:
			why = meter.Disagreement(r.Figure, derived)
		}
		if why == "" {
			ok++
			return nil
		}
		bad++
		out.printf("DISAGREES: %s:%d: seq %d request %s: %s\n", file, line, r.Seq, r.RequestID, why)
		return nil
	})
	if err != nil {
		return err
	}
	out.printf("%d record(s) re-derived from their inputs, %d disagree, %d without inputs (no inputs: written before they were kept)", ok, bad, noInputs)
	if torn > 0 {
		out.printf(", %d torn last line(s) skipped", torn)
	}
	out.printf("\n")
	if out.err != nil {
		return out.err
	}
	if bad > 0 {
		return fmt.Errorf("%w: %d record(s)", errRecompute, bad)
	}
	return nil
}
