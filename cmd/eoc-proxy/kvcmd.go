package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade/kv"
)

func init() { register("kv", runKV) }

const kvUsage = `usage:
  eoc-proxy kv export [-config F] FILE
  eoc-proxy kv import [-config F] [-tenant T] [-model M] [-joules J] FILE

export writes every learned kv entry as JSON Lines (tenant, model, question, context, stop,
answer, joules, completion_tokens, created); FILE "-" is standard output. import learns each line
of such a file, or of plain {"question","answer"} lines, into the store under
cascade.kv.data_dir, embedding with the configured embedder; -tenant, -model and -joules fill
fields a line leaves empty. Run import while the proxy is stopped: a running proxy sees imported
entries only after a restart.`

// runKV exports and imports the kv stage's learned entries.
func runKV(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New(kvUsage) //nolint:staticcheck // ST1005: the error is the usage text, which main prints whole
	}
	switch args[0] {
	case "export":
		return kvExport(args[1:], stdout)
	case "import":
		return kvImport(args[1:], stdout)
	case "help", "-h", "-help", "--help":
		_, _ = fmt.Fprintln(stdout, kvUsage) // help asked for: a failed write has no one to tell
		return flag.ErrHelp
	}
	return fmt.Errorf("unknown subcommand %q\n%s", args[0], kvUsage)
}

// openKV opens the configured kv store, which must be on disk.
func openKV(path string) (*kv.Stage, error) {
	cfg, err := loadConfig(path)
	if err != nil {
		return nil, err
	}
	if cfg.Cascade.KV.DataDir == "" {
		return nil, errors.New("cascade.kv.data_dir is empty: the kv store lives in memory and there is nothing on disk to import into or export from")
	}
	o, err := kvOptions(cfg, nil, filesFor(path), component(newLogger("warn", os.Stderr), "kv")) // offline: no meter
	if err != nil {
		return nil, err
	}
	return kv.New(o)
}

func kvExport(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("kv export", flag.ContinueOnError)
	path := configFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("export: want one FILE\n%s", kvUsage)
	}
	s, err := openKV(*path)
	if err != nil {
		return err
	}
	defer func() { _ = s.Close() }() // export only reads the store: its close loses nothing
	name := fs.Arg(0)
	if name == "-" {
		_, err := s.Export(stdout, nil)
		return err
	}
	// Written beside the target and renamed, so an interrupted export leaves no half file.
	tmp, err := os.CreateTemp(filepath.Dir(name), filepath.Base(name)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // fails once the rename below has moved it: nothing left to remove
	p := newProgress(stdout, "export")
	n, err := s.Export(tmp, func(done, total int) { p.report(done, fmt.Sprintf("of %d entries", total)) })
	if err == nil {
		err = tmp.Close()
	} else {
		_ = tmp.Close() // the export's error is the one to report
	}
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "kv export: %d entries written to %s\n", n, name)
	return err
}

func kvImport(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("kv import", flag.ContinueOnError)
	path := configFlag(fs)
	tenant := fs.String("tenant", "", "tenant for lines that name none")
	model := fs.String("model", "", "model for lines that name none")
	joules := fs.Float64("joules", 0, "joules saved per answer for lines that give none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("import: want one FILE\n%s", kvUsage)
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // read-only: a close error loses nothing
	st, err := f.Stat()
	if err != nil {
		return err
	}
	s, err := openKV(*path)
	if err != nil {
		return err
	}
	defer func() { _ = s.Close() }() // on an error path; the success path closes it and checks below
	cr := &countingReader{r: f}
	p := newProgress(stdout, "import")
	n, err := s.Import(context.Background(), cr, kv.Record{Tenant: *tenant, Model: *model, Joules: *joules}, func(done int) {
		p.report(done, fmt.Sprintf("entries, %s of %s (%d%%)", mib(cr.n), mib(st.Size()), percent(cr.n, st.Size())))
	})
	if err != nil {
		return fmt.Errorf("import %s: %w (%d entries imported before it)", fs.Arg(0), err, n)
	}
	if err := s.Close(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "kv import: %d entries imported from %s; the store holds %d\n", n, fs.Arg(0), s.Stats().Entries)
	return err
}

// progress prints a line at most once a second, so a large file shows it is moving.
type progress struct {
	w    io.Writer
	verb string
	last time.Time
}

func newProgress(w io.Writer, verb string) *progress {
	return &progress{w: w, verb: verb, last: time.Now()}
}

func (p *progress) report(done int, detail string) {
	if time.Since(p.last) < time.Second {
		return
	}
	p.last = time.Now()
	_, _ = fmt.Fprintf(p.w, "kv %s: %d %s\n", p.verb, done, detail) // best effort: the command's last line reports its write error
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func percent(n, total int64) int64 {
	if total <= 0 {
		return 100
	}
	return n * 100 / total
}
