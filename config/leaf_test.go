package config

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/eoc-proxy/eoc-proxy"

// TestConfigIsALeaf: config imports nothing from the project, and no stage imports config (the
// stages take their own Options; cmd maps eoc.yaml onto them).
func TestConfigIsALeaf(t *testing.T) {
	for _, tc := range []struct {
		dir    string
		forbid func(path string) bool
	}{
		{".", func(p string) bool { return strings.HasPrefix(p, module+"/") || p == module }},
		{"../cascade", func(p string) bool { return p == module+"/config" }},
	} {
		n := 0
		err := filepath.WalkDir(tc.dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			n++
			for _, imp := range f.Imports {
				if p, _ := strconv.Unquote(imp.Path.Value); tc.forbid(p) {
					t.Errorf("%s imports %s", path, p)
				}
			}
			return nil
		})
		if err != nil || n == 0 {
			t.Fatalf("%s: %d files read, %v", tc.dir, n, err)
		}
	}
}
