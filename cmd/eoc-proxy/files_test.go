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
