package graph

import (
	"testing"
	"testing/fstest"
)

// TestFilesFromFS reads facts through the given file system, not the disk, and reloads from it.
func TestFilesFromFS(t *testing.T) {
	fsys := fstest.MapFS{"facts/f.tsv": {Data: []byte("France\tcapital\tParis\n")}}
	s, err := New(Options{Files: []string{"facts/f.tsv"}, FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	fsys["facts/f.tsv"] = &fstest.MapFile{Data: []byte("France\tcapital\tParis\nJapan\tcapital\tTokyo\n")}
	if err := s.Reload(); err != nil || s.Len() != 2 {
		t.Fatalf("reload from the FS: %v, %d facts", err, s.Len())
	}
	if _, err := New(Options{Files: []string{"facts/other.tsv"}, FS: fsys}); err == nil {
		t.Fatal("a file missing from the FS loaded")
	}
}
