package eocproxy

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocs keeps the map honest: every package opens with a one-line comment that says
// what it is for ("Package x ..." or, for main, "Command x ...").
func TestPackageDocs(t *testing.T) {
	// Package name -> the doc comments of its non-test files, per directory.
	type pkgDoc struct{ name, doc string }
	docs := map[string]*pkgDoc{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		p := docs[dir]
		if p == nil {
			p = &pkgDoc{name: f.Name.Name}
			docs[dir] = p
		}
		if f.Doc != nil {
			p.doc += f.Doc.Text()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 5 {
		t.Fatalf("found only %d packages; the walk is broken", len(docs))
	}
	for dir, p := range docs {
		want := "Package " + p.name + " "
		if p.name == "main" {
			want = "Command "
		}
		if !strings.HasPrefix(p.doc, want) {
			t.Errorf("%s: package %s has no doc comment starting %q", dir, p.name, want)
		}
	}
}
