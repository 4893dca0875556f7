package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/eoc-proxy/eoc-proxy/ledger"
)

func init() { register("receipts", runReceipts) }

const receiptsUsage = `usage:
  eoc-proxy receipts verify [-hmac-key-env NAME] [-partial] [-json] FILE...
  eoc-proxy receipts sum [-by key|model|stage|day] [-json] FILE...
  eoc-proxy receipts recompute FILE...

FILE... are a ledger's files, e.g. ledger.jsonl* (rotated files and the active one, in any
order; set-aside *.torn files are listed, not verified). Replicas keep one ledger each
(ledger-<replica_id>.jsonl*): give the files of several and each chain is verified apart, and
sum totals them all.`

// runReceipts checks and totals the receipts ledger.
func runReceipts(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New(receiptsUsage) //nolint:staticcheck // ST1005: the error is the usage text, which main prints whole
	}
	switch args[0] {
	case "verify":
		return receiptsVerify(args[1:], stdout)
	case "sum":
		return receiptsSum(args[1:], stdout)
	case "recompute":
		return receiptsRecompute(args[1:], stdout)
	case "help", "-h", "-help", "--help":
		_, _ = fmt.Fprintln(stdout, receiptsUsage) // help asked for: a failed write has no one to tell
		return flag.ErrHelp
	}
	return fmt.Errorf("unknown subcommand %q\n%s", args[0], receiptsUsage)
}

// receiptsVerify verifies the chain and fails naming the first broken record.
func receiptsVerify(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("receipts verify", flag.ContinueOnError)
	keyEnv := fs.String("hmac-key-env", "", "name of the environment variable that holds the ledger's HMAC key (ledger.hmac_key)")
	partial := fs.Bool("partial", false, "accept a chain that starts after genesis (older rotated files archived away)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("verify: no files\n%s", receiptsUsage)
	}
	v := ledger.Verifier{Partial: *partial}
	if *keyEnv != "" {
		secret := os.Getenv(*keyEnv)
		if secret == "" {
			return fmt.Errorf("verify: environment variable %s is empty or unset", *keyEnv)
		}
		v.HMACKey = []byte(secret)
	}
	chains, setAside := ledger.Chains(fs.Args())
	if len(chains) <= 1 {
		return verifyChain(v, fs.Args(), *asJSON, stdout)
	}
	// Several replicas' ledgers: each is its own chain, verified apart; any break fails all.
	// The set-aside files are listed once, with the first.
	chains[0] = append(chains[0], setAside...)
	var errs []error
	for _, files := range chains {
		if !*asJSON {
			if _, err := fmt.Fprintf(stdout, "== %s\n", ledger.Active(files)); err != nil {
				return err
			}
		}
		if err := verifyChain(v, files, *asJSON, stdout); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// verifyChain verifies the files of one chain and prints its report.
func verifyChain(v ledger.Verifier, files []string, asJSON bool, stdout io.Writer) error {
	rep, err := v.Verify(files...)
	if err != nil && rep.Broken == nil {
		return err // I/O
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(rep); jerr != nil {
			return jerr
		}
		return err
	}
	out := &printer{w: stdout}
	for _, f := range rep.SetAside {
		out.printf("set aside: %s (bytes torn off by a crash recovery; not verified)\n", f)
	}
	if t := rep.Torn; t != nil {
		out.printf("torn: %s:%d: %d bytes at offset %d lack a newline (a crash mid-write; eoc-proxy sets them aside when it next opens the ledger)\n",
			t.File, t.Line, t.Bytes, t.Offset)
	}
	if err != nil {
		out.printf("BROKEN: %d records verified before %s\n", rep.Records, rep.Broken.File)
		return err
	}
	hash := "SHA-256"
	if rep.HMAC {
		hash = "HMAC-SHA256"
	}
	start := "from genesis"
	if !rep.Genesis {
		start = "NOT from genesis (-partial)"
	}
	if rep.Records == 0 {
		out.printf("ok: no records in %d file(s)\n", len(rep.Files))
		return out.err
	}
	out.printf("ok: %d records, seq %d..%d %s, %s, %d file(s)\nhead: seq %d hash %s\n",
		rep.Records, rep.FirstSeq, rep.LastSeq, start, hash, len(rep.Files), rep.LastSeq, rep.LastHash)
	if rep.Settlements > 0 || rep.Unsettled > 0 {
		out.printf("settlements: %d provisional GPU figures settled; %d never settled (their provisional figure stands)\n",
			rep.Settlements, rep.Unsettled)
	}
	return out.err
}

// receiptsSum totals joules and joules saved by one grouping.
func receiptsSum(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("receipts sum", flag.ContinueOnError)
	by := fs.String("by", "model", "group by key (key id), model, stage or day (UTC)")
	asJSON := fs.Bool("json", false, "print the totals as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("sum: no files\n%s", receiptsUsage)
	}
	if _, ok := sumHeaders[*by]; !ok {
		return fmt.Errorf("sum: -by %q is not one of key, model, stage, day", *by)
	}
	t, err := ledger.Sum(fs.Args()...)
	if err != nil {
		return err
	}
	rows, err := t.Group(*by)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			By    string       `json:"by"`
			Rows  []ledger.Row `json:"rows"`
			Total ledger.Total `json:"total"`
			Torn  int          `json:"torn,omitempty"`
		}{*by, rows, t.Total, t.Torn})
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	out := &printer{w: tw}
	out.printf("%s\tRECORDS\tJOULES\tJOULES SAVED\n", sumHeaders[*by])
	line := func(name string, v ledger.Total) {
		out.printf("%s\t%d\t%s\t%s\n", name, v.Records, joules(v.Joules), joules(v.JoulesSaved))
	}
	for _, r := range rows {
		name := r.Name
		if name == "" {
			name = "(none)"
		}
		line(name, r.Total)
	}
	line("TOTAL", t.Total)
	if t.Torn > 0 {
		out.printf("(%d torn last line(s) skipped)\n", t.Torn)
	}
	if out.err != nil {
		return out.err
	}
	return tw.Flush()
}

var sumHeaders = map[string]string{"key": "KEY ID", "key_id": "KEY ID", "model": "MODEL", "stage": "STAGE", "day": "DAY (UTC)"}

func joules(j float64) string { return strconv.FormatFloat(j, 'f', 3, 64) }
