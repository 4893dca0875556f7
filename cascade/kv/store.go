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

// openDB opens the chromem-go DB under dir. A store that does not load is repaired rather than
// refused, so the proxy still starts: files that do not decode are renamed *.corrupt (chromem-go
// skips them) and a collection without readable metadata is moved to dir.corrupt/; if the store
// still does not load, the whole directory is moved aside and a fresh one begins. Every repair is
// logged at warn.
func openDB(dir string, log zerolog.Logger) (*chromem.DB, error) {
	db, err := chromem.NewPersistentDB(dir, false)
	if err == nil {
		return db, nil
	}
	log.Warn().Err(err).Str("data_dir", dir).Msg("kv store does not load; quarantining unreadable files")
	n, qerr := quarantine(dir)
	if qerr != nil {
		log.Warn().Err(qerr).Str("data_dir", dir).Msg("kv store quarantine incomplete")
	}
	if db, err = chromem.NewPersistentDB(dir, false); err == nil {
		log.Warn().Int("quarantined", n).Str("data_dir", dir).Msg("kv store loaded without its unreadable files")
		return db, nil
	}
	aside := fmt.Sprintf("%s.corrupt-%s", strings.TrimRight(dir, "/"), time.Now().UTC().Format("20060102T150405"))
	if rerr := os.Rename(dir, aside); rerr != nil {
		return nil, fmt.Errorf("kv store %s does not load (%v) and cannot be moved aside: %w", dir, err, rerr)
	}
	log.Warn().Err(err).Str("data_dir", dir).Str("moved_to", aside).Msg("kv store moved aside; starting empty")
	return chromem.NewPersistentDB(dir, false)
}

// Shapes of chromem-go's gob files, for checking that they decode.
type (
	gobDocument struct {
		ID        string
		Metadata  map[string]string
		Embedding []float32
		Content   string
	}
	gobCollection struct {
		Name     string
		Metadata map[string]string
	}
)

// chromemMeta is chromem-go's collection metadata file.
const chromemMeta = "00000000.gob"

// quarantine renames every undecodable document file and moves out collections whose metadata
// does not decode. It returns how many files or directories it set aside.
func quarantine(dir string) (int, error) {
	cols, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, c := range cols {
		if !c.IsDir() {
			continue
		}
		cdir := filepath.Join(dir, c.Name())
		files, err := os.ReadDir(cdir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var meta gobCollection
		if decodeFile(filepath.Join(cdir, chromemMeta), &meta) != nil || meta.Name == "" {
			dst := filepath.Join(strings.TrimRight(dir, "/")+".corrupt", c.Name())
			if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
				errs = append(errs, err)
				continue
			}
			if err := os.Rename(cdir, dst); err != nil {
				errs = append(errs, err)
				continue
			}
			n++
			continue
		}
		for _, f := range files {
			if f.IsDir() || f.Name() == chromemMeta || !strings.HasSuffix(f.Name(), ".gob") {
				continue
			}
			p := filepath.Join(cdir, f.Name())
			var d gobDocument
			if decodeFile(p, &d) == nil && d.ID != "" {
				continue
			}
			if err := os.Rename(p, p+".corrupt"); err != nil {
				errs = append(errs, err)
				continue
			}
			n++
		}
	}
	return n, errors.Join(errs...)
}

func decodeFile(p string, v any) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return gob.NewDecoder(f).Decode(v)
}

// loadCollection reads every entry of a chromem collection, oldest first. Entries that do not
// parse are skipped and counted.
func loadCollection(ctx context.Context, col *chromem.Collection, dim int) ([]*entry, int, error) {
	n := col.Count()
	if n == 0 {
		return nil, 0, nil
	}
	// chromem-go has no listing call; a query for all n documents is one.
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
