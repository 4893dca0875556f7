// Package ledger keeps the receipts: one hash-chained JSONL record for every call.
//
// A Ledger appends Records to a file, one JSON object a line. Each record carries the hash of
// the record before it (prev) and its own hash over all its fields, so that Verify finds a record
// edited, removed, reordered or inserted; with an HMAC key only the key's holder can forge a
// record that verifies. The file rotates at a size and the chain runs on across the files. Open
// recovers from a crash mid-write. Sum totals the joules by key id, model, stage and day.
package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Fsync policies.
const (
	// FsyncEvery makes Append return only once its record is on disk. Concurrent appends share
	// an fsync (group commit), so the cost per record falls as concurrency rises.
	FsyncEvery = "every"
	// FsyncBatch makes Append return once its record is written to the operating system; a
	// background flusher fsyncs every BatchInterval, and Close fsyncs what is left. A crash of
	// the process loses nothing; a crash of the machine may lose the last interval.
	FsyncBatch = "batch"
)

// DefaultBatchInterval is the flush interval of FsyncBatch when Options.BatchInterval is zero.
const DefaultBatchInterval = 200 * time.Millisecond

// Options configure a Ledger.
type Options struct {
	// Path is the active file. "" means no ledger: Open returns a nil *Ledger.
	Path string
	// Fsync is FsyncEvery (the default when "") or FsyncBatch.
	Fsync string
	// HMACKey, when set, makes each record's hash an HMAC-SHA256 under this key, so that only a
	// holder of the key can forge a record that verifies.
	HMACKey []byte
	// MaxBytes rotates the active file once it reaches this size; 0 never rotates.
	MaxBytes int64
	// BatchInterval is how often FsyncBatch flushes; DefaultBatchInterval when zero.
	BatchInterval time.Duration
	// Logger receives recovery, rotation and failure events. The zero Logger discards them.
	Logger zerolog.Logger
}

// Errors a caller can branch on.
var (
	// ErrClosed is returned by Append after Close.
	ErrClosed = errors.New("ledger: closed")
	// ErrLocked is returned by Open when another process holds the ledger open.
	ErrLocked = errors.New("ledger: in use by another process")
	// ErrCorrupt is returned by Open when the last complete line of the ledger is not a record:
	// that is not a crash mid-write, and a person should look before the chain goes on.
	ErrCorrupt = errors.New("ledger: corrupt")
)

// Ledger appends records to a hash-chained JSONL file. It is safe for concurrent use: appends
// are serialized, and each record's Seq and Prev follow the one appended before it.
//
// A nil *Ledger is a valid "no ledger": Append records nothing and Close does nothing. The zero
// Ledger is not usable; call Open.
//
// Once a write cannot be undone or an fsync fails, the Ledger is failed: every later Append
// returns that error (an fsync that failed once cannot be trusted to report a later loss), and
// the process should be restarted so that Open recovers the file.
type Ledger struct {
	path     string
	fsync    string
	maxBytes int64
	key      []byte
	log      zerolog.Logger
	recovery *Recovery

	mu     sync.Mutex // guards the fields below and serializes writes
	f      *os.File
	size   int64 // bytes in f
	seq    uint64
	prev   string
	seal   *sealer
	line   bytes.Buffer  // the record being written, encoded by enc
	enc    *json.Encoder // encodes into line: json.Marshal's bytes and the newline, without a copy
	retry  int64         // size at which to retry a rotation that failed; 0 when none failed
	closed bool
	err    error // sticky failure

	syncMu  sync.Mutex    // serializes fsyncs
	durable atomic.Uint64 // every record with Seq <= durable is on disk

	stop chan struct{} // closes the batch flusher
	done chan struct{}
}

// Recovery describes the torn tail that Open found after a crash mid-write.
type Recovery struct {
	// Offset is where the torn bytes began: the file was truncated there.
	Offset int64 `json:"offset"`
	// Bytes is how many bytes were torn off.
	Bytes int64 `json:"bytes"`
	// SavedTo is the file that now holds the torn bytes, for a person to inspect.
	SavedTo string `json:"saved_to"`
	// Salvaged is true when the tail was a whole record that only lacked its newline and
	// chained correctly: it was kept, and Offset, Bytes and SavedTo are zero.
	Salvaged bool `json:"salvaged,omitempty"`
}

// Open opens the ledger at o.Path, creating it (and its directory) when missing. With an empty
// Path it returns nil, nil: the nil *Ledger is the no-op ledger.
//
// Open recovers from a crash: a torn last line is moved aside to "<path>.<time>.<offset>.torn"
// and truncated off, with a warning, and the chain continues from the last whole record. An
// empty active file continues the chain of the newest rotated file beside it.
func Open(o Options) (*Ledger, error) {
	if o.Path == "" {
		return nil, nil
	}
	switch o.Fsync {
	case "":
		o.Fsync = FsyncEvery
	case FsyncEvery, FsyncBatch:
	default:
		return nil, fmt.Errorf("ledger: fsync %q is not one of %s, %s", o.Fsync, FsyncEvery, FsyncBatch)
	}
	if o.BatchInterval <= 0 {
		o.BatchInterval = DefaultBatchInterval
	}
	if o.MaxBytes < 0 {
		o.MaxBytes = 0
	}
	o.Path = filepath.Clean(o.Path)
	if err := os.MkdirAll(filepath.Dir(o.Path), 0o750); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	f, created, err := openActive(o.Path)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	if err := lockFile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("ledger %s: %w", o.Path, err)
	}
	l := &Ledger{
		path:     o.Path,
		fsync:    o.Fsync,
		maxBytes: o.MaxBytes,
		key:      bytes.Clone(o.HMACKey),
		log:      o.Logger,
		f:        f,
		seal:     newSealer(o.HMACKey),
	}
	if err := l.recover(); err != nil {
		_ = f.Close()
		return nil, err
	}
	if created {
		l.syncDir()
	}
	l.durable.Store(l.seq)
	if l.fsync == FsyncBatch {
		l.stop, l.done = make(chan struct{}), make(chan struct{})
		go l.flusher(o.BatchInterval)
	}
	l.log.Debug().Str("path", l.path).Uint64("seq", l.seq).Str("fsync", l.fsync).Bool("hmac", len(l.key) > 0).Msg("ledger open")
	return l, nil
}

// openActive opens path for appending, creating it when missing, and reports whether it did.
func openActive(path string) (*os.File, bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		return f, true, nil
	}
	if !errors.Is(err, os.ErrExist) {
		return nil, false, err
	}
	f, err = os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0o600)
	return f, false, err
}

// Path returns the active file's path ("" for the nil ledger).
func (l *Ledger) Path() string {
	if l == nil {
		return ""
	}
	return l.path
}

// Recovered returns what Open did about a torn tail, or nil when the file ended cleanly.
func (l *Ledger) Recovered() *Recovery {
	if l == nil {
		return nil
	}
	return l.recovery
}

// Head returns the Seq and Hash of the last record appended (0 and ZeroHash for an empty
// chain). Written down elsewhere, they anchor the chain's end, which the chain alone cannot.
func (l *Ledger) Head() (seq uint64, hash string) {
	if l == nil {
		return 0, ZeroHash
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq, l.prev
}

// Append chains r after the last record and writes it. It fills Seq, Prev, Hash and Receipt
// (and Time, with now, when zero) and returns the record as written. r.Receipt may be left
// empty; when set it must equal the receipt of r's fields, or Append returns ErrInvalid.
//
// With FsyncEvery, Append returns once the record is on disk; with FsyncBatch, once it is
// written to the operating system. An error means the record may not be durable.
//
// On the nil ledger Append records nothing and returns r with Time and Receipt filled.
func (l *Ledger) Append(r Record) (Record, error) {
	if l == nil {
		return r, normalize(&r, time.Now)
	}
	if err := normalize(&r, time.Now); err != nil {
		return r, err
	}
	r, err := l.write(r)
	if err != nil {
		return r, err
	}
	if l.fsync == FsyncEvery {
		if err := l.syncTo(r.Seq); err != nil {
			return r, err
		}
	}
	return r, nil
}

// write chains and writes one record under the lock, and rotates when the file is full.
func (l *Ledger) write(r Record) (Record, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return r, ErrClosed
	}
	if l.err != nil {
		return r, l.err
	}
	r.Seq, r.Prev = l.seq+1, l.prev
	r.Hash = l.seal.seal(&r)
	if l.enc == nil {
		l.enc = json.NewEncoder(&l.line)
	}
	l.line.Reset()
	if err := l.enc.Encode(&r); err != nil {
		return r, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	n, err := l.f.Write(l.line.Bytes())
	if err != nil {
		err = fmt.Errorf("ledger: writing %s: %w", l.path, err)
		if n > 0 {
			if terr := l.f.Truncate(l.size); terr != nil {
				return r, l.failLocked(fmt.Errorf("%w; undoing the partial write: %w", err, terr))
			}
		}
		return r, err
	}
	l.size += int64(n)
	l.seq, l.prev = r.Seq, r.Hash
	if l.maxBytes > 0 && l.size >= l.maxBytes && l.size >= l.retry {
		if err := l.rotateLocked(); err != nil {
			if l.err != nil {
				return r, l.err
			}
			l.retry = l.size + l.maxBytes
			l.log.Error().Err(err).Str("path", l.path).Msg("ledger rotation failed; appending to the current file and retrying later")
		}
	}
	return r, nil
}

// syncTo returns once every record up to seq n is on disk. Callers that arrive while an fsync
// runs wait for it and then share the next one.
func (l *Ledger) syncTo(n uint64) error {
	if l.durable.Load() >= n {
		return nil
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	if l.durable.Load() >= n {
		return nil
	}
	l.mu.Lock()
	f, target, err := l.f, l.seq, l.err
	l.mu.Unlock()
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		if l.durable.Load() >= n { // a rotation or Close synced and closed f meanwhile
			return nil
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.failLocked(fmt.Errorf("ledger: fsync %s: %w", l.path, err))
	}
	l.mu.Lock()
	err = l.err
	l.mu.Unlock()
	if err != nil {
		return err
	}
	l.markDurable(target)
	return nil
}

func (l *Ledger) markDurable(n uint64) {
	for {
		d := l.durable.Load()
		if d >= n || l.durable.CompareAndSwap(d, n) {
			return
		}
	}
}

// failLocked makes err the ledger's sticky failure (the first one wins) and returns it.
func (l *Ledger) failLocked(err error) error {
	if l.err == nil {
		l.err = err
		l.log.Error().Err(err).Str("path", l.path).Uint64("seq", l.seq).Msg("ledger failed: no more records will be written until restart")
	}
	return l.err
}

// rotateLocked syncs the full file, renames it to "<path>.<UTC time>.<last seq>" and starts an
// empty active file that continues the chain.
func (l *Ledger) rotateLocked() error {
	if err := l.f.Sync(); err != nil {
		return l.failLocked(fmt.Errorf("ledger: fsync %s before rotating: %w", l.path, err))
	}
	l.markDurable(l.seq)
	name := rotatedName(l.path, time.Now(), l.seq)
	if err := os.Rename(l.path, name); err != nil {
		return err
	}
	nf, err := os.OpenFile(l.path, os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		if err = lockFile(nf); err != nil {
			_ = nf.Close()
		}
	}
	if err != nil {
		if rerr := os.Rename(name, l.path); rerr != nil {
			return l.failLocked(fmt.Errorf("ledger: rotating: %w; renaming %s back: %w", err, name, rerr))
		}
		return fmt.Errorf("ledger: starting a new file: %w", err)
	}
	old := l.f
	l.f, l.size, l.retry = nf, 0, 0
	_ = old.Close()
	l.syncDir()
	l.log.Info().Str("path", l.path).Str("rotated", name).Uint64("seq", l.seq).Msg("ledger rotated")
	return nil
}

// rotatedName names a rotated file so that names sort in chain order.
func rotatedName(path string, t time.Time, lastSeq uint64) string {
	return fmt.Sprintf("%s.%s.%012d", path, t.UTC().Format(stampLayout), lastSeq)
}

const stampLayout = "20060102T150405Z"

// syncDir makes renames and creations in the ledger's directory durable. Failures are logged:
// some systems cannot fsync a directory.
func (l *Ledger) syncDir() {
	d, err := os.Open(filepath.Dir(l.path))
	if err == nil {
		err = d.Sync()
		_ = d.Close()
	}
	if err != nil {
		l.log.Warn().Err(err).Str("path", l.path).Msg("ledger: cannot fsync the directory")
	}
}

func (l *Ledger) flusher(every time.Duration) {
	defer close(l.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.mu.Lock()
			n := l.seq
			l.mu.Unlock()
			_ = l.syncTo(n) // a failure is sticky and logged by failLocked
		}
	}
}

// Close flushes every record to disk and closes the file. Appends after Close return
// ErrClosed; Close on a closed or nil ledger returns nil.
func (l *Ledger) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	if l.stop != nil {
		close(l.stop)
		<-l.done
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.err
	if err == nil {
		if serr := l.f.Sync(); serr != nil {
			err = l.failLocked(fmt.Errorf("ledger: fsync %s: %w", l.path, serr))
		} else {
			l.markDurable(l.seq)
		}
	}
	if cerr := l.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("ledger: closing %s: %w", l.path, cerr)
	}
	return err
}
