package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "data", "facts.tsv"), "local facts\n")
	writeFile(t, filepath.Join(dir, "mine.jsonl"), "mine\n")
	elsewhere := filepath.Join(t.TempDir(), "abs.tsv")
	writeFile(t, elsewhere, "absolute\n")
	shipped, err := os.ReadFile("../../data/faq.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	files := filesFor(filepath.Join(dir, "eoc.yaml"))
	for _, tc := range []struct {
		name, file, want string
	}{
		{"beside the config", "mine.jsonl", "mine\n"},
		{"a file on disk beats the shipped copy", "data/facts.tsv", "local facts\n"},
		{"a shipped file missing on disk", "data/faq.jsonl", string(shipped)},
		{"a shipped file, spelled loosely", "./data//faq.jsonl", string(shipped)},
		{"absolute", elsewhere, "absolute\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := fs.ReadFile(files, tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Fatalf("read %q, want %q", b, tc.want)
			}
		})
	}
	for _, missing := range []string{"nope.jsonl", "data/nope.tsv", filepath.Join(dir, "data", "faq.jsonl")} {
		_, err := files.Open(missing)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: err = %v, want not-exist", missing, err)
		}
		if err != nil && !strings.Contains(err.Error(), dir) && !filepath.IsAbs(missing) {
			t.Errorf("%s: the error %q does not say where it looked", missing, err)
		}
	}
	// The embedded default config's files resolve against the working directory.
	b, err := fs.ReadFile(filesFor(defaultConfigPath), "data/faq.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != string(shipped) {
		t.Fatal("data/faq.jsonl from the working directory")
	}
}

// TestLoadConfigPathsBesideIt: the kv store, the ledger and pid files named relatively in a config
// file are beside it, like its seed and fact files; absolute ones stay as written.
func TestLoadConfigPathsBesideIt(t *testing.T) {
	dir := t.TempDir()
	abs := filepath.Join(t.TempDir(), "ledger.jsonl")
	p := filepath.Join(dir, "eoc.yaml")
	writeFile(t, p, `
backends: [{name: a, type: ollama, url: "http://127.0.0.1:11434", process: {pid_file: run/ollama.pid}}]
cascade: {kv: {data_dir: state/kv}}
ledger: {path: `+abs+`}
`)
	c, err := loadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "state", "kv"); c.Cascade.KV.DataDir != want {
		t.Errorf("data_dir = %q, want %q", c.Cascade.KV.DataDir, want)
	}
	if want := filepath.Join(dir, "run", "ollama.pid"); c.Backends[0].Process.PIDFile != want {
		t.Errorf("pid_file = %q, want %q", c.Backends[0].Process.PIDFile, want)
	}
	if c.Ledger.Path != abs {
		t.Errorf("ledger.path = %q, want it as written, %q", c.Ledger.Path, abs)
	}
}
