package eocproxy

import (
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocs keeps the map honest: every package opens with a comment that says what it is
// for in one sentence ("Package x ..." or, for main, "Command x ..."), the sentence `go doc`
// shows as its synopsis. Further paragraphs may follow; the first is that sentence alone, and one
// file carries the comment, since go doc joins them all.
func TestPackageDocs(t *testing.T) {
	// Per directory: the package name and the doc comment of each non-test file that has one.
	type pkgDoc struct {
		name  string
		files []string
		doc   string
	}
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
			p.files = append(p.files, path)
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
			continue
		}
		if len(p.files) > 1 {
			t.Errorf("%s: %d files carry a package comment (%s); go doc joins them, keep one", dir, len(p.files), strings.Join(p.files, ", "))
		}
		if first, ok := oneSentence(p.doc); !ok {
			t.Errorf("%s: the doc's first paragraph is not one sentence; go doc's synopsis is %q of %q", dir, new(doc.Package).Synopsis(p.doc), first)
		}
	}
}

// oneSentence reports whether the first paragraph of a doc comment is a single sentence ending
// in a period, that is, the whole of the synopsis go doc shows. It returns the paragraph.
func oneSentence(text string) (string, bool) {
	first, _, _ := strings.Cut(strings.TrimSpace(text), "\n\n")
	first = strings.Join(strings.Fields(first), " ")
	return first, strings.HasSuffix(first, ".") && new(doc.Package).Synopsis(text) == first
}

// TestOneSentence checks the check: a synopsis that go doc would cut short, or that does not
// end, fails.
func TestOneSentence(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      bool
	}{
		{"one sentence", "Package x does one thing.\n", true},
		{"one sentence over lines", "Package x does\none thing, well.\n", true},
		{"one sentence, then a paragraph", "Package x does one thing.\n\nIt does it like this. And so.\n", true},
		{"two sentences", "Package x does one thing. It does it well.\n", false},
		{"a colon, then a list", "Package x does these:\n\n  - one\n", false},
		{"no period", "Package x does one thing\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, got := oneSentence(tc.doc); got != tc.want {
				t.Errorf("oneSentence(%q) = %v, want %v", tc.doc, got, tc.want)
			}
		})
	}
}
