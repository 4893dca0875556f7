package graph

import (
	"io"
	"io/fs"
	"os"
)

// DefaultSavedJoules is what a graph answer reports as saved while this proxy has no running
// figure for the model asked (Options.Estimator): the stated cost of the small-model
// call it replaces (a 1B-class model writing a ~30-token answer at ~0.3 J/token on a
// laptop-class CPU or GPU). It is an estimate, not a measurement; Options.SavedJoules changes it.
const DefaultSavedJoules = 10.0

// Options configure a Stage. The zero value is usable: a stage with no facts.
type Options struct {
	// Files are the fact files, read from FS: .nt is N-Triples, anything else TSV.
	Files []string
	// FS is where Files are read; nil reads them from the operating system by the names as
	// given.
	FS fs.FS
	// SavedJoules is what an answer reports as saved while Estimator has no figure for the
	// model; 0 is DefaultSavedJoules.
	SavedJoules float64
	// Estimator, when set, gives what the model asked would have spent writing each answer.
	Estimator Estimator
}

// open opens name from fsys, or from the operating system when fsys is nil.
func open(fsys fs.FS, name string) (io.ReadCloser, error) {
	if fsys == nil {
		return os.Open(name)
	}
	return fsys.Open(name)
}
