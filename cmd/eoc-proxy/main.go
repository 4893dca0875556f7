// Command eoc-proxy is an OpenAI-compatible inference proxy that meters the energy of every call.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"

	eocproxy "github.com/eoc-proxy/eoc-proxy"
	"github.com/eoc-proxy/eoc-proxy/config"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

// commands maps a subcommand to its runner. Files beside this one register theirs in init.
var commands = map[string]func(args []string, stdout io.Writer) error{
	"serve":   runServe,
	"config":  runConfig,
	"version": runVersion,
}

func register(name string, run func(args []string, stdout io.Writer) error) {
	if _, dup := commands[name]; dup {
		panic("duplicate command " + name)
	}
	commands[name] = run
}

func main() {
	args := os.Args[1:]
	name := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	run, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "eoc-proxy: unknown command %q\n\n", name)
		usage(os.Stderr)
		os.Exit(2)
	}
	if err := run(args, os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "eoc-proxy %s: %v\n", name, err)
		os.Exit(1)
	}
}

func usage(w io.Writer) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	_, _ = fmt.Fprintf(w, "usage: eoc-proxy [command] [flags]\ncommands: %s (default serve)\n", strings.Join(names, ", "))
}

const defaultConfigPath = "eoc.yaml"

// configFlag adds -config to fs.
func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", defaultConfigPath, "path to the YAML config; the embedded default when the default path is missing")
}

// loadConfig reads the config at path. The default path falls back to the embedded eoc.yaml when
// the file is not there, so the binary runs anywhere. A relative path in the file names a file
// beside it, as the seed and fact files do (filesFor): the kv store, the ledger, pid files.
func loadConfig(path string) (*config.Config, error) {
	if path == defaultConfigPath {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return config.Parse(eocproxy.DefaultConfig, registry())
		}
	}
	c, err := config.Load(path, registry())
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	besideConfig(dir, &c.Cascade.KV.DataDir)
	besideConfig(dir, &c.Ledger.Path)
	for i := range c.Backends {
		besideConfig(dir, &c.Backends[i].Process.PIDFile)
	}
	return c, nil
}

// besideConfig makes a relative, non-empty *p relative to dir, the config file's directory.
func besideConfig(dir string, p *string) {
	if *p != "" && !filepath.IsAbs(*p) {
		*p = filepath.Join(dir, *p)
	}
}

func runConfig(args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "check" {
		return errors.New("usage: eoc-proxy config check [-config F]")
	}
	fs := flag.NewFlagSet("config check", flag.ContinueOnError)
	path := configFlag(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	c, err := loadConfig(*path)
	if err != nil {
		return err
	}
	out, err := c.Masked()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "# %s: valid\n%s", *path, out)
	return err
}

func runVersion(_ []string, stdout io.Writer) error {
	_, err := fmt.Fprintln(stdout, "eoc-proxy", buildVersion())
	return err
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// printer writes a command's report line by line and keeps the first write error, so a report
// of many lines is checked once. The zero value is not usable; set w.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, a ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, a...)
	}
}
