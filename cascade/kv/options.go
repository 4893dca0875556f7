package kv

import (
	"io"
	"io/fs"
	"os"

	"github.com/rs/zerolog"
)

// Defaults for the Options a caller leaves at zero (DefaultOptions holds them all).
const (
	DefaultThreshold             = 0.95
	DefaultMaxEntries            = 100000
	DefaultMaxTotalEntries       = 200000
	DefaultMaxCollections        = 1000
	DefaultMaxBytes              = 512 << 20
	DefaultMaxEntryBytes         = 1 << 20
	DefaultLearnQueue            = 1024
	DefaultMaxSimilarTemperature = 0.5
	// DefaultSeedJoules is what a seeded answer reports as saved unless its file says otherwise:
	// the stated cost of one small-model call (a 1B-class model writing a ~30-token answer at
	// ~0.3 J/token on a laptop-class CPU or GPU). A seed was never made by a model here, so this
	// is an estimate, not a measurement.
	DefaultSeedJoules = 10.0
)

// Options configure a Stage. The zero value is usable: every zero field takes its default.
type Options struct {
	// Embedder turns texts into vectors; nil is Builtin.
	Embedder Embedder
	// Threshold is the cosine similarity a hit needs, on the last user message and on the whole
	// conversation; 0 is DefaultThreshold.
	Threshold float64
	// SeedFiles are operator question/answer files, read from Files (see loadSeeds).
	SeedFiles []string
	// Files is where SeedFiles are read; nil reads them from the operating system by the names
	// as given.
	Files fs.FS
	// DataDir is where learned entries persist; "" keeps them in memory.
	DataDir string
	// MaxEntries bounds each tenant and model's entries, the oldest evicted first; 0 is
	// DefaultMaxEntries.
	MaxEntries int
	// MaxTotalEntries bounds the entries of all tenants and models together (see bound.go);
	// 0 is the larger of DefaultMaxTotalEntries and MaxEntries.
	MaxTotalEntries int
	// MaxBytes bounds the bytes of all entries together (question, context, answer, vector;
	// see bound.go); 0 is DefaultMaxBytes.
	MaxBytes int64
	// MaxEntryBytes bounds one entry: a larger answer is not learned, and counts in
	// Stats.TooLarge; 0 is DefaultMaxEntryBytes.
	MaxEntryBytes int
	// MaxCollections bounds the number of tenant and model collections; beyond it the least
	// recently used is dropped. 0 is DefaultMaxCollections.
	MaxCollections int
	// MaxSimilarTemperature is the hottest request that similarity matching serves; nil is
	// DefaultMaxSimilarTemperature (0 is a bound: only temperature-0 requests are matched).
	MaxSimilarTemperature *float64
	// LearnQueue bounds the answers waiting to be learned (more are dropped); 0 is
	// DefaultLearnQueue.
	LearnQueue int
	// SeedJoules is what a seeded answer reports as saved when its file gives no figure; 0 is
	// DefaultSeedJoules.
	SeedJoules float64
	// Estimator, when set, makes a seeded answer whose file gives no joules report as saved what
	// the model asked would have spent writing it; SeedJoules is used only while it has no figure.
	Estimator Estimator
	// Logger receives warnings: a store that needed repair, answers not learned. The zero
	// Logger discards them.
	Logger zerolog.Logger
}

// DefaultOptions returns the Options New uses for fields left at zero, all filled in, for a
// caller that shows or fills defaults (eoc-proxy fills its config from them).
func DefaultOptions() Options {
	t := DefaultMaxSimilarTemperature
	return Options{
		Embedder:              Builtin{},
		Threshold:             DefaultThreshold,
		MaxEntries:            DefaultMaxEntries,
		MaxTotalEntries:       DefaultMaxTotalEntries,
		MaxCollections:        DefaultMaxCollections,
		MaxBytes:              DefaultMaxBytes,
		MaxEntryBytes:         DefaultMaxEntryBytes,
		MaxSimilarTemperature: &t,
		LearnQueue:            DefaultLearnQueue,
		SeedJoules:            DefaultSeedJoules,
	}
}

// withDefaults fills the zero fields of o from DefaultOptions.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.Embedder == nil {
		o.Embedder = d.Embedder
	}
	if o.Threshold <= 0 {
		o.Threshold = d.Threshold
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = d.MaxEntries
	}
	if o.MaxTotalEntries <= 0 {
		o.MaxTotalEntries = max(d.MaxTotalEntries, o.MaxEntries)
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = d.MaxBytes
	}
	if o.MaxEntryBytes <= 0 {
		o.MaxEntryBytes = d.MaxEntryBytes
	}
	if o.MaxCollections <= 0 {
		o.MaxCollections = d.MaxCollections
	}
	if o.MaxSimilarTemperature == nil {
		o.MaxSimilarTemperature = d.MaxSimilarTemperature
	}
	if o.LearnQueue <= 0 {
		o.LearnQueue = d.LearnQueue
	}
	if o.SeedJoules <= 0 {
		o.SeedJoules = d.SeedJoules
	}
	return o
}

// open opens name from fsys, or from the operating system when fsys is nil.
func open(fsys fs.FS, name string) (io.ReadCloser, error) {
	if fsys == nil {
		return os.Open(name)
	}
	return fsys.Open(name)
}
