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

const module = "github.com/eoc-proxy/eoc-proxy"

// modelClients are the HTTP client and the model servers' SDKs: only backends dials a model, so
// every model call goes through a backend and a meter span.
var modelClients = []string{"net/http", "github.com/ollama/ollama/api", "github.com/sashabaranov/go-openai", "github.com/openai/openai-go"}

// TestLayers keeps the house's boundaries (ARCHITECTURE.md at the module root, "Never"): for each
// directory, the imports its non-test files may not have. Tests may import what they like.
func TestLayers(t *testing.T) {
	inModule := func(p string) bool { return p == module || strings.HasPrefix(p, module+"/") }
	under := func(pkgs ...string) func(string) bool {
		return func(p string) bool {
			for _, q := range pkgs {
				if p == q || strings.HasPrefix(p, q+"/") {
					return true
				}
			}
			return false
		}
	}
	for _, rule := range []struct {
		dir, why string
		forbid   func(path string) bool
	}{
		{"cascade", "only backends talks to model servers", under(modelClients...)},
		{"cascade", "the cascade knows no HTTP edge, and stages take their own Options", under(module+"/proxy", module+"/config")},
		{"proxy", "the edge reaches models only through the cascade, and records through an interface", under(module+"/backends", module+"/ledger", module+"/meter")},
		{"meter", "the meter knows no stages and no HTTP edge", under(module+"/cascade", module+"/proxy")},
		{"config", "config is a leaf", inModule},
		{"energy", "energy is a leaf", inModule},
		{"ledger", "the ledger stores figures, it makes none", under(module+"/cascade", module+"/proxy", module+"/meter")},
		{"cascade", "the shared store is behind interfaces the cascade declares", under("github.com/redis", module+"/cluster")},
		{"proxy", "the shared store is behind interfaces the edge declares", under("github.com/redis", module+"/cluster")},
	} {
		n := 0
		err := filepath.WalkDir(rule.dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			n++
			for _, imp := range f.Imports {
				if p, _ := strconv.Unquote(imp.Path.Value); rule.forbid(p) {
					t.Errorf("%s imports %s: %s", path, p, rule.why)
				}
			}
			return nil
		})
		if err != nil || n == 0 {
			t.Fatalf("%s: %d files read, %v", rule.dir, n, err)
		}
	}
}

// testEnv holds what tests and measuring commands run against (fake model servers, a Redis, the
// tiny model, a browser): it may import the app's packages, as a test does.
const testEnv = "internal/testenv"

// TestInternalSplit keeps internal/ in two parts: the leaf helpers the app imports (procs,
// text, ...), which import nothing of ours, so nothing there points back up into the app; and
// internal/testenv, which only tests, e2e and scripts import.
func TestInternalSplit(t *testing.T) {
	leaves, envs := 0, 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || (path != "." && strings.HasPrefix(d.Name(), "."))) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		leaf := strings.HasPrefix(dir, "internal/") && !strings.HasPrefix(dir, testEnv)
		if leaf {
			leaves++
		}
		mayUseEnv := strings.HasPrefix(dir, testEnv) || strings.HasPrefix(dir, "scripts/") || strings.HasPrefix(dir, "e2e")
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if leaf && (p == module || strings.HasPrefix(p, module+"/")) {
				t.Errorf("%s imports %s: a leaf helper in internal/ imports nothing of ours", path, p)
			}
			if strings.HasPrefix(p, module+"/"+testEnv) {
				envs++
				if !mayUseEnv {
					t.Errorf("%s imports %s: only tests, e2e and scripts use %s", path, p, testEnv)
				}
			}
		}
		return nil
	})
	if err != nil || leaves == 0 || envs == 0 {
		t.Fatalf("%d leaf files, %d imports of %s seen: %v", leaves, envs, testEnv, err)
	}
}
