package ledger

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
)

// ErrBroken is wrapped by every *Break: the chain does not verify.
var ErrBroken = errors.New("ledger: chain broken")

// Break names the first record where a chain stops verifying.
type Break struct {
	File   string `json:"file"`
	Line   int    `json:"line"`          // 1-based line in File
	Seq    uint64 `json:"seq,omitempty"` // the seq the line claims, when it parses
	Reason string `json:"reason"`
}

func (b *Break) Error() string {
	if b.Seq > 0 {
		return fmt.Sprintf("%s:%d: seq %d: %s", b.File, b.Line, b.Seq, b.Reason)
	}
	return fmt.Sprintf("%s:%d: %s", b.File, b.Line, b.Reason)
}

// Unwrap makes errors.Is(b, ErrBroken) true.
func (b *Break) Unwrap() error { return ErrBroken }

// Torn is a last line without its newline: a crash mid-write that Open has not yet recovered
// (or a read that raced a write). It is reported, not verified, and does not break the chain.
type Torn struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	Offset int64  `json:"offset"`
	Bytes  int64  `json:"bytes"`
}

// Report is what Verify found.
type Report struct {
	// Files are the files verified, in chain order.
	Files []string `json:"files"`
	// Records counts the records that verified.
	Records int `json:"records"`
	// FirstSeq and LastSeq bound the verified records; LastHash is the head of the chain. The
	// chain cannot vouch for its own end: compare LastSeq and LastHash with a head written down
	// elsewhere (Ledger.Head) to detect records cut off the end.
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	LastHash string `json:"last_hash"`
	// Genesis is true when the chain starts at seq 1 with a zero prev.
	Genesis bool `json:"genesis"`
	// HMAC is true when hashes were checked as HMACs under a key.
	HMAC bool `json:"hmac"`
	// Torn is the torn last line of the last file, if any.
	Torn *Torn `json:"torn,omitempty"`
	// SetAside lists the ".torn" files given: bytes that recovery moved aside. They are not
	// part of the chain and are not verified.
	SetAside []string `json:"set_aside,omitempty"`
	// Broken is the first record that fails, nil when the chain verifies.
	Broken *Break `json:"broken,omitempty"`
	// Settlements counts the settlement records among Records; Unsettled the calls whose
	// figure is provisional and that no settlement follows (the proxy stopped, or the counter's
	// wait failed, before it settled): their provisional figure, whose bounds hold the settled
	// one, stands.
	Settlements int `json:"settlements,omitempty"`
	Unsettled   int `json:"unsettled,omitempty"`
}

// OK reports whether the chain verified.
func (r *Report) OK() bool { return r.Broken == nil }

// Verifier checks ledger files. The zero value checks SHA-256 hashes of a chain that must start
// at genesis. A Verifier is safe for concurrent use.
type Verifier struct {
	// HMACKey checks each hash as an HMAC-SHA256 under this key. A record forged without the key
	// fails, even with a recomputed hash.
	HMACKey []byte
	// Partial accepts a chain that starts after genesis, for when older rotated files were
	// archived away; the Report's Genesis says which it was. Records cut off the head of a
	// chain are then undetectable.
	Partial bool
}

// Verify checks the files of one chain with the zero Verifier: SHA-256 hashes, from genesis.
func Verify(files ...string) (Report, error) { return Verifier{}.Verify(files...) }

// Verify checks every record of the files, in chain order (see Order): that each line is the
// canonical encoding of a record, that its hash (or HMAC) covers its fields, that its receipt
// matches its fields, that seqs follow without gaps and that each prev is the hash of the
// record before, and that a settlement record settles, once, a provisional call record before it
// of the same request (in a chain that starts after genesis, a call not found may be in the
// files archived away, and is not checked). It stops at the first failure, which it names in
// Report.Broken and returns as a *Break error (wrapping ErrBroken). Other errors are I/O errors.
func (v Verifier) Verify(files ...string) (Report, error) {
	rep := Report{HMAC: len(v.HMACKey) > 0}
	if len(files) == 0 {
		return rep, errors.New("ledger: verify: no files")
	}
	rep.Files, rep.SetAside = Order(files)
	seal := newSealer(v.HMACKey)
	var last *Record
	unsettled := map[string]string{} // provisional calls' receipts → their request ids
	settled := map[string]bool{}     // the receipts settlements named: each is settled once
	for i, name := range rep.Files {
		lastFile := i == len(rep.Files)-1
		err := scanFile(name, func(line []byte, n int, off int64, whole bool) error {
			if !whole {
				if lastFile {
					rep.Torn = &Torn{File: name, Line: n, Offset: off, Bytes: int64(len(line))}
					return nil
				}
				return &Break{File: name, Line: n, Reason: "torn line (no newline) before the end of the chain"}
			}
			r, err := decodeLine(line)
			if err != nil {
				return &Break{File: name, Line: n, Seq: r.Seq, Reason: "not a record: " + err.Error()}
			}
			bad := func(format string, a ...any) error {
				return &Break{File: name, Line: n, Seq: r.Seq, Reason: fmt.Sprintf(format, a...)}
			}
			if h := seal.seal(&r); h != r.Hash {
				if rep.HMAC {
					return bad("HMAC mismatch: the record was altered or forged without the key")
				}
				return bad("hash mismatch: the record was altered (or the ledger has an HMAC key: verify with it)")
			}
			if rc := r.receipt().Hash(); rc != r.Receipt {
				return bad("receipt %s does not match the record's fields (want %s)", r.Receipt, rc)
			}
			switch {
			case last != nil && r.Seq != last.Seq+1:
				return bad("seq follows %d: records removed, reordered or inserted", last.Seq)
			case last != nil && r.Prev != last.Hash:
				return bad("prev %s is not the hash of seq %d (%s): records removed, reordered or inserted", r.Prev, last.Seq, last.Hash)
			case last == nil && r.Prev == ZeroHash && r.Seq != 1:
				return bad("the first record of a chain (zero prev) must have seq 1")
			case last == nil && r.Prev != ZeroHash && !v.Partial:
				return bad("the chain does not start at genesis (seq 1, zero prev): earlier files missing or records removed from the head")
			}
			if last == nil {
				rep.FirstSeq, rep.Genesis = r.Seq, r.Prev == ZeroHash
			}
			if r.Settles != "" {
				id, ok := unsettled[r.Settles]
				switch {
				case settled[r.Settles]:
					return bad("settles receipt %s, settled already", r.Settles)
				case ok && id != r.RequestID:
					return bad("settles receipt %s, which is request %s's, not request %s's", r.Settles, id, r.RequestID)
				case !ok && rep.Genesis:
					return bad("settles receipt %s, which is no provisional call before it in the chain, or one settled already", r.Settles)
				}
				delete(unsettled, r.Settles)
				settled[r.Settles] = true
				rep.Settlements++
			} else if r.Provisional {
				unsettled[r.Receipt] = r.RequestID
			}
			last = &r
			rep.Records++
			rep.LastSeq, rep.LastHash = r.Seq, r.Hash
			return nil
		})
		var b *Break
		if errors.As(err, &b) {
			rep.Broken = b
			return rep, b
		}
		if err != nil {
			return rep, err
		}
	}
	rep.Unsettled = len(unsettled)
	return rep, nil
}

// scanFile calls fn for each line of the file (without its newline), with its 1-based number,
// its offset and whether it ended with a newline. It stops at fn's first error.
func scanFile(name string, fn func(line []byte, n int, off int64, whole bool) error) error {
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	defer f.Close() //nolint:errcheck // read-only: a close error loses nothing
	br := bufio.NewReaderSize(f, 64<<10)
	var off int64
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			whole := line[len(line)-1] == '\n'
			if ferr := fn(bytes.TrimSuffix(line, []byte{'\n'}), n, off, whole); ferr != nil {
				return ferr
			}
			off += int64(len(line))
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("ledger: reading %s: %w", name, err)
		}
	}
}

// Order sorts the files of a ledger into chain order: for each active file, its rotated files
// ("<path>.<UTC time>.<seq>") by the last seq their name carries, then the active file itself.
// Files set aside by recovery ("….torn") are returned apart. Duplicates are dropped.
func Order(files []string) (chain, setAside []string) {
	seen := map[string]bool{}
	var infos []fileInfo
	for _, f := range files {
		c := filepath.Clean(f)
		if seen[c] {
			continue
		}
		seen[c] = true
		fi := parseName(f)
		if fi.kind == kindTorn {
			setAside = append(setAside, f)
			continue
		}
		infos = append(infos, fi)
	}
	sort.SliceStable(infos, func(i, j int) bool {
		a, b := infos[i], infos[j]
		switch {
		case a.base != b.base:
			return a.base < b.base
		case a.kind != b.kind:
			return a.kind < b.kind
		case a.seq != b.seq:
			return a.seq < b.seq
		}
		return a.name < b.name
	})
	for _, fi := range infos {
		chain = append(chain, fi.name)
	}
	sort.Strings(setAside)
	return chain, setAside
}

type fileKind int

const (
	kindRotated fileKind = iota
	kindActive
	kindTorn
)

type fileInfo struct {
	name string
	base string // the active file's path, cleaned
	kind fileKind
	seq  uint64
}

var (
	rotatedRE = regexp.MustCompile(`^(.+)\.\d{8}T\d{6}Z\.(\d+)$`)
	tornRE    = regexp.MustCompile(`\.torn$`)
)

func parseName(name string) fileInfo {
	c := filepath.Clean(name)
	if tornRE.MatchString(c) {
		return fileInfo{name: name, base: c, kind: kindTorn}
	}
	if m := rotatedRE.FindStringSubmatch(c); m != nil {
		if seq, err := strconv.ParseUint(m[2], 10, 64); err == nil {
			return fileInfo{name: name, base: m[1], kind: kindRotated, seq: seq}
		}
	}
	return fileInfo{name: name, base: c, kind: kindActive}
}
