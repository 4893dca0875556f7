package kv

import (
	"cmp"
	"context"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	chromem "github.com/philippgille/chromem-go"
	"github.com/rs/zerolog"
)

// The persistent store is a chromem-go DB under data_dir: one chromem collection per tenant and
// model (and embedder), one gob file per entry, written when the entry is learned and removed
// when it is evicted. chromem-go keeps the documents; the stage's own index (index.go) answers
// queries, because chromem-go's exhaustive query takes milliseconds at 100k entries.

// colName is a chromem collection's name: JSON, so tenant and model need no escaping. chromem-go
// stores collections under a hash of the name.
type colName struct {
	KV       int    `json:"kv"`
	Embedder string `json:"embedder"`
	Dim      int    `json:"dim"`
	Tenant   string `json:"tenant"`
	Model    string `json:"model"`
}

const storeVersion = 1

func (n colName) String() string {
	b, _ := json.Marshal(n)
	return string(b)
}

// Document metadata keys.
const (
	metaQuestion = "q"
	metaAnswer   = "a"
	metaParams   = "p"
	metaJoules   = "j"
	metaTokens   = "ct"
	metaSeq      = "s"
	metaCreated  = "t"
)

func docOf(e *entry) chromem.Document {
	return chromem.Document{
		ID: e.id,
		Metadata: map[string]string{
			metaQuestion: e.question,
			metaAnswer:   e.answer,
			metaParams:   e.params,
			metaJoules:   strconv.FormatFloat(e.joules, 'g', -1, 64),
			metaTokens:   strconv.Itoa(e.ctok),
			metaSeq:      strconv.FormatUint(e.seq, 10),
			metaCreated:  strconv.FormatInt(e.created, 10),
		},
		Embedding: e.vec,
		Content:   e.context,
	}
}

func entryOf(r chromem.Result) (*entry, error) {
	m := r.Metadata
	joules, err := strconv.ParseFloat(m[metaJoules], 64)
	if err != nil {
		return nil, fmt.Errorf("joules: %w", err)
	}
	ctok, err := strconv.Atoi(m[metaTokens])
	if err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	seq, err := strconv.ParseUint(m[metaSeq], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("seq: %w", err)
	}
	created, _ := strconv.ParseInt(m[metaCreated], 10, 64)
	if m[metaAnswer] == "" || r.Content == "" {
		return nil, errors.New("no answer or no context")
	}
	return &entry{
		id: r.ID, vec: r.Embedding, seq: seq, question: m[metaQuestion], context: r.Content,
		params: m[metaParams], answer: m[metaAnswer], joules: joules, ctok: ctok, created: created,
	}, nil
}

// noEmbed is the collections' embedding function: the stage always passes vectors.
func noEmbed(context.Context, string) ([]float32, error) {
	return nil, errors.New("kv: entries carry their own vectors")
}

// openDB opens the chromem-go DB under dir with chromem.NewPersistentDB, which writes one gob file
// per document as it is added and removes it on Delete.
//
// What chromem-go v0.7.0's API cannot do: open a store that holds one unreadable file. Its
// AddDocument writes a document's file in place (os.Create, then gob), so a crash mid-write leaves
// a torn file, and NewPersistentDB then returns an error and no DB: it has no option to skip a
// file, and no call repairs a store. So a store that does not load is repaired here, relying only
// on the layout chromem-go's NewPersistentDB documents (a collection is a subdirectory; its
// uncompressed files ending in ".gob" are read, anything else is skipped):
//
//  1. every .gob file that does not decode as a chromem.Document (the type chromem-go writes; its
//     collection metadata decodes as one too) is renamed *.corrupt;
//  2. if the store still does not load (a torn metadata file leaves a collection without a name),
//     the collections that had a file set aside are moved to dir.corrupt/;
//  3. if it still does not load, the whole directory is moved aside and a fresh one begins.
//
// The proxy starts in every case; every repair is logged at warn.
func openDB(dir string, log zerolog.Logger) (*chromem.DB, error) {
	db, err := chromem.NewPersistentDB(dir, false)
	if err == nil {
		return db, nil
	}
	log.Warn().Err(err).Str("data_dir", dir).Msg("kv store does not load; setting unreadable files aside")
	touched, n, qerr := quarantineFiles(dir)
	if qerr != nil {
		log.Warn().Err(qerr).Str("data_dir", dir).Msg("kv store quarantine incomplete")
	}
	if db, err = chromem.NewPersistentDB(dir, false); err == nil {
		log.Warn().Int("quarantined", n).Str("data_dir", dir).Msg("kv store loaded without its unreadable files")
		return db, nil
	}
	if moved, merr := moveCollections(dir, touched); merr != nil {
		log.Warn().Err(merr).Str("data_dir", dir).Msg("kv store: collections not moved aside")
	} else if moved > 0 {
		if db, err = chromem.NewPersistentDB(dir, false); err == nil {
			log.Warn().Int("collections", moved).Str("moved_to", corruptDir(dir)).Msg("kv store loaded without its unreadable collections")
			return db, nil
		}
	}
	aside := fmt.Sprintf("%s.corrupt-%s", strings.TrimRight(dir, "/"), time.Now().UTC().Format("20060102T150405"))
	if rerr := os.Rename(dir, aside); rerr != nil {
		return nil, fmt.Errorf("kv store %s does not load (%w) and cannot be moved aside: %w", dir, err, rerr)
	}
	log.Warn().Err(err).Str("data_dir", dir).Str("moved_to", aside).Msg("kv store moved aside; starting empty")
	return chromem.NewPersistentDB(dir, false)
}

func corruptDir(dir string) string { return strings.TrimRight(dir, "/") + ".corrupt" }

// quarantineFiles renames every .gob file under dir's collection directories that does not decode
// as a chromem.Document to *.corrupt. It returns the collection directories it touched and how
// many files it set aside.
func quarantineFiles(dir string) (touched []string, n int, err error) {
	cols, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, err
	}
	var errs []error
	for _, c := range cols {
		if !c.IsDir() {
			continue
		}
		cdir := filepath.Join(dir, c.Name())
		files, err := os.ReadDir(cdir)
		if err != nil {
			errs = append(errs, err)
			touched = append(touched, cdir)
			continue
		}
		hit := false
		for _, f := range files {
			if f.IsDir() || !strings.HasSuffix(f.Name(), ".gob") {
				continue
			}
			p := filepath.Join(cdir, f.Name())
			if decodes(p) {
				continue
			}
			hit = true
			if err := os.Rename(p, p+".corrupt"); err != nil {
				errs = append(errs, err)
				continue
			}
			n++
		}
		if hit {
			touched = append(touched, cdir)
		}
	}
	return touched, n, errors.Join(errs...)
}

// decodes reports whether the file at p is a whole gob that decodes as a chromem.Document.
func decodes(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	var d chromem.Document
	return gob.NewDecoder(f).Decode(&d) == nil
}

// moveCollections moves collection directories into dir.corrupt/ and returns how many it moved.
func moveCollections(dir string, cdirs []string) (int, error) {
	n := 0
	var errs []error
	for _, cdir := range cdirs {
		dst := filepath.Join(corruptDir(dir), filepath.Base(cdir))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return n, err
		}
		if err := os.Rename(cdir, dst); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// loadCollection reads every entry of a chromem collection, oldest first. Entries that do not
// parse are skipped and counted.
func loadCollection(ctx context.Context, col *chromem.Collection, dim int) ([]*entry, int, error) {
	n := col.Count()
	if n == 0 {
		return nil, 0, nil
	}
	// What chromem-go v0.7.0's API cannot do: list a collection. It has Count and GetByID, but
	// GetByID needs the IDs, which only the documents hold, and no call returns them. A query
	// for all n documents (any probe vector; every document is within the top n) is the one
	// public way to read them all: an exhaustive scan and a sort, once per collection at start.
	probe := make([]float32, dim)
	probe[0] = 1
	res, err := col.QueryEmbedding(ctx, probe, n, nil, nil)
	if err != nil {
		return nil, 0, err
	}
	out := make([]*entry, 0, len(res))
	bad := 0
	for _, r := range res {
		e, err := entryOf(r)
		if err != nil || len(e.vec) != dim {
			bad++
			continue
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *entry) int { return cmp.Compare(a.seq, b.seq) })
	return out, bad, nil
}
