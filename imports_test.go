package eocproxy

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCascadeDialsNoModel: every call to a model server goes through backends and the meter, so
// no package under cascade/ imports an HTTP client or a model server's SDK (tests may).
func TestCascadeDialsNoModel(t *testing.T) {
	forbidden := []string{"net/http", "github.com/ollama/ollama/api", "github.com/sashabaranov/go-openai", "github.com/openai/openai-go"}
	fset := token.NewFileSet()
	seen := 0
	err := filepath.WalkDir("cascade", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		seen++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbidden {
				if p == bad || strings.HasPrefix(p, bad+"/") {
					t.Errorf("%s imports %s: only backends talk to model servers", path, p)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 10 {
		t.Fatalf("parsed only %d files under cascade/: is the test in the module root?", seen)
	}
}
