// Package data ships the example seed files (faq.jsonl, facts.tsv) inside the binary, so the
// default eoc.yaml works from any directory.
package data

import (
	"embed"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

//go:embed faq.jsonl facts.tsv
var shipped embed.FS

// Open opens the file at name on disk. When it is not there and name is one of the shipped files
// ("data/faq.jsonl", "data/facts.tsv", relative as eoc.yaml writes them), it opens the copy built
// into the binary instead; embedded reports which. Any other error is returned as is.
func Open(name string) (rc io.ReadCloser, embedded bool, err error) {
	f, err := os.Open(name)
	if err == nil {
		return f, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	clean := path.Clean(filepath.ToSlash(name))
	if rest, ok := strings.CutPrefix(clean, "data/"); ok {
		if ef, eerr := shipped.Open(rest); eerr == nil {
			return ef, true, nil
		}
	}
	return nil, false, err
}
