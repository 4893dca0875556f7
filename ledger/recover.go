package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// recover reads the active file's tail and sets seq, prev and size from its last whole record,
// moving a torn tail aside first. An active file without records continues the chain of the
// newest rotated file.
func (l *Ledger) recover() error {
	st, err := l.f.Stat()
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	size := st.Size()
	last, end, err := lastLine(l.f, size)
	if err != nil {
		return fmt.Errorf("ledger: reading the tail of %s: %w", l.path, err)
	}
	var lastRec *Record
	if last != nil {
		rec, err := decodeLine(last)
		if err != nil {
			return fmt.Errorf("%w: %s: the last line (%d bytes before offset %d) is not a record: %w",
				ErrCorrupt, l.path, len(last), end, err)
		}
		lastRec = &rec
	} else {
		if lastRec, err = l.rotatedHead(); err != nil {
			return err
		}
	}
	if end < size {
		var salvaged *Record
		if end, salvaged, err = l.repairTail(lastRec, end, size); err != nil {
			return err
		}
		if salvaged != nil {
			lastRec = salvaged
		}
	}
	l.size = end
	l.seq, l.prev = lastRec.Seq, lastRec.Hash
	if lastRec.Seq > 0 {
		l.checkKey(lastRec)
	}
	return nil
}

// repairTail handles the bytes [end, size) after the last newline, left by a crash mid-write.
// A whole record that chains after last only lacks its newline and is kept; anything else is
// copied aside and truncated off. It returns the new end of the good bytes, and the kept record.
func (l *Ledger) repairTail(last *Record, end, size int64) (int64, *Record, error) {
	if rec, ok := l.wholeRecord(last, end, size); ok {
		if _, err := l.f.Write([]byte{'\n'}); err != nil {
			return 0, nil, fmt.Errorf("ledger: completing the last record of %s: %w", l.path, err)
		}
		if err := l.f.Sync(); err != nil {
			return 0, nil, fmt.Errorf("ledger: fsync %s: %w", l.path, err)
		}
		l.recovery = &Recovery{Salvaged: true}
		l.log.Warn().Str("path", l.path).Uint64("seq", rec.Seq).Msg("ledger: the last record lacked its newline (crash mid-write); kept it")
		return size + 1, rec, nil
	}
	saved, err := saveTorn(l.path, end, io.NewSectionReader(l.f, end, size-end))
	if err != nil {
		return 0, nil, fmt.Errorf("ledger: setting the torn tail of %s aside: %w", l.path, err)
	}
	if err := l.f.Truncate(end); err != nil {
		return 0, nil, fmt.Errorf("ledger: truncating the torn tail of %s: %w", l.path, err)
	}
	if err := l.f.Sync(); err != nil {
		return 0, nil, fmt.Errorf("ledger: fsync %s: %w", l.path, err)
	}
	l.syncDir()
	l.recovery = &Recovery{Offset: end, Bytes: size - end, SavedTo: saved}
	l.log.Warn().Str("path", l.path).Int64("offset", end).Int64("bytes", size-end).Str("saved_to", saved).
		Uint64("seq", last.Seq).Msg("ledger: torn last line (crash mid-write) truncated; the chain continues from the last whole record")
	return end, nil, nil
}

// maxRecord bounds the torn tail that recovery tries to read as a whole record.
const maxRecord = 1 << 20

// wholeRecord reports whether the bytes [end, size) are a whole record, chained after last and
// hashed under the ledger's key, that only lacks its newline.
func (l *Ledger) wholeRecord(last *Record, end, size int64) (*Record, bool) {
	if size-end > maxRecord {
		return nil, false
	}
	b := make([]byte, size-end)
	if _, err := l.f.ReadAt(b, end); err != nil {
		return nil, false
	}
	rec, err := decodeLine(b)
	if err != nil || rec.Seq != last.Seq+1 || rec.Prev != last.Hash ||
		rec.Hash != newSealer(l.key).seal(&rec) || rec.Receipt != rec.receipt().Hash() {
		return nil, false
	}
	return &rec, true
}

// saveTorn copies torn bytes to a new "<path>.<UTC time>.<offset>.torn" file.
func saveTorn(path string, off int64, torn io.Reader) (string, error) {
	base := fmt.Sprintf("%s.%s.%d", path, time.Now().UTC().Format(stampLayout), off)
	for i := 0; ; i++ {
		name := base + ".torn"
		if i > 0 {
			name = fmt.Sprintf("%s-%d.torn", base, i)
		}
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) && i < 100 {
			continue
		}
		if err != nil {
			return "", err
		}
		_, err = io.Copy(f, torn)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return name, err
	}
}

// rotatedHead returns the last record of the newest rotated file beside the active one, or an
// empty record with a zero hash when there is none.
func (l *Ledger) rotatedHead() (*Record, error) {
	dir := filepath.Dir(l.path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	var newest string
	var newestSeq uint64
	for _, e := range entries {
		m := filepath.Join(dir, e.Name())
		if fi := parseName(m); fi.kind == kindRotated && fi.base == l.path && (newest == "" || fi.seq > newestSeq) {
			newest, newestSeq = m, fi.seq
		}
	}
	if newest == "" {
		return &Record{Hash: ZeroHash}, nil
	}
	f, err := os.Open(newest)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	defer f.Close() //nolint:errcheck // read-only: a close error loses nothing
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	last, end, err := lastLine(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("ledger: reading the tail of %s: %w", newest, err)
	}
	if last == nil || end != st.Size() {
		return nil, fmt.Errorf("%w: rotated file %s does not end with a whole record", ErrCorrupt, newest)
	}
	rec, err := decodeLine(last)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: the last line is not a record: %w", ErrCorrupt, newest, err)
	}
	l.log.Info().Str("path", l.path).Str("from", newest).Uint64("seq", rec.Seq).Msg("ledger: continuing the chain of the rotated file")
	return &rec, nil
}

// checkKey warns when the last record's hash does not verify under the ledger's key: the key
// changed (or was lost), and the chain will not verify under one key across this point.
func (l *Ledger) checkKey(last *Record) {
	if newSealer(l.key).seal(last) != last.Hash {
		l.log.Warn().Str("path", l.path).Uint64("seq", last.Seq).Bool("hmac", len(l.key) > 0).
			Msg("ledger: the last record's hash does not verify under this ledger's key (was the HMAC key changed or lost?)")
	}
}

// lastLine returns the last newline-terminated line of the first size bytes of r (without its
// newline) and the offset just past that newline. With no newline at all, it returns nil, 0.
func lastLine(r io.ReaderAt, size int64) ([]byte, int64, error) {
	nl, err := lastNewline(r, size)
	if err != nil || nl < 0 {
		return nil, 0, err
	}
	start, err := lastNewline(r, nl)
	if err != nil {
		return nil, 0, err
	}
	line := make([]byte, nl-(start+1))
	if _, err := r.ReadAt(line, start+1); err != nil {
		return nil, 0, err
	}
	return line, nl + 1, nil
}

// lastNewline returns the offset of the last '\n' before offset end, or -1.
func lastNewline(r io.ReaderAt, end int64) (int64, error) {
	buf := make([]byte, 32<<10)
	for end > 0 {
		n := min(int64(len(buf)), end)
		off := end - n
		if _, err := r.ReadAt(buf[:n], off); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return off + int64(i), nil
		}
		end = off
	}
	return -1, nil
}

// decodeLine parses one line (without its newline) and checks that it is exactly the encoding
// of the record it holds: no extra space, unknown or repeated fields, or other spellings.
func decodeLine(line []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(line, &r); err != nil {
		return r, err
	}
	b, err := json.Marshal(&r)
	if err != nil {
		return r, err
	}
	if !bytes.Equal(b, line) {
		return r, errNotCanonical
	}
	return r, nil
}

var errNotCanonical = errors.New("not the canonical encoding of its record (edited by hand?)")
