package main

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/eoc-proxy/eoc-proxy/data"
)

// configFiles is the file system the kv and graph stages read eoc.yaml's files from
// (cascade.kv.seed_files, cascade.graph.files). A name is opened as eoc.yaml writes it: absolute,
// or relative to dir, the config file's directory. When data/faq.jsonl or data/facts.tsv is not
// on disk there, the copy built into the binary is served, so the default eoc.yaml runs from any
// directory.
//
// Unlike fs.ValidPath asks, a name may be absolute or climb with "..": these are the operator's
// paths, and configFiles is no sandbox. The zero value reads relative to the working directory.
type configFiles struct{ dir string }

var _ fs.FS = configFiles{}

// filesFor is the configFiles of the config at configPath (the working directory for the
// embedded default, whose path is the bare "eoc.yaml").
func filesFor(configPath string) configFiles { return configFiles{dir: filepath.Dir(configPath)} }

// Open opens name on disk, or its shipped copy when it is one of data/'s files and missing.
func (c configFiles) Open(name string) (fs.File, error) {
	p := filepath.FromSlash(name)
	if !filepath.IsAbs(p) {
		p = filepath.Join(c.dir, p)
	}
	f, err := os.Open(p)
	if err == nil {
		return f, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if rest, ok := strings.CutPrefix(path.Clean(filepath.ToSlash(name)), "data/"); ok {
		if ef, eerr := data.Shipped.Open(rest); eerr == nil {
			return ef, nil
		}
	}
	return nil, err
}
