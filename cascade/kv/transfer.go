package kv

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Record is one learned entry as Export writes it and Import reads it, one JSON object a line.
// Vectors are not exported: Import embeds again, so a file moves between embedders.
type Record struct {
	Tenant   string `json:"tenant,omitempty"`
	Model    string `json:"model"`
	Question string `json:"question"`
	// Context is the conversation as the stage renders it ("role: text" lines, the question
	// last); empty means the question alone.
	Context          string   `json:"context,omitempty"`
	Stop             []string `json:"stop,omitempty"`
	Answer           string   `json:"answer"`
	Joules           float64  `json:"joules,omitempty"`
	CompletionTokens int      `json:"completion_tokens,omitempty"`
	// Created is when the answer was learned, unix seconds.
	Created int64 `json:"created,omitempty"`
}

// Export writes every learned entry as JSON Lines, by tenant and model, oldest first. progress,
// when set, is called after each entry with the count so far and the total.
func (s *Stage) Export(w io.Writer, progress func(done, total int)) (int, error) {
	s.mu.RLock()
	cols := make([]*collection, 0, len(s.cols))
	for _, c := range s.cols {
		cols = append(cols, c)
	}
	s.mu.RUnlock()
	slices.SortFunc(cols, func(a, b *collection) int {
		return cmp.Or(cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.model, b.model))
	})
	entries := make([][]*entry, len(cols))
	total := 0
	for i, c := range cols {
		entries[i] = c.entries()
		total += len(entries[i])
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	done := 0
	for i, c := range cols {
		for _, e := range entries[i] {
			rec := Record{
				Tenant: c.tenant, Model: c.model, Question: e.question, Answer: e.answer,
				Joules: e.joules, CompletionTokens: e.ctok, Created: e.created,
			}
			if e.context != contextOf(e.question) {
				rec.Context = e.context
			}
			if e.params != "" {
				var p struct{ Stop []string }
				_ = json.Unmarshal([]byte(e.params), &p)
				rec.Stop = p.Stop
			}
			if err := enc.Encode(rec); err != nil {
				return done, err
			}
			done++
			if progress != nil {
				progress(done, total)
			}
		}
	}
	return done, bw.Flush()
}

// importBatch is how many records Import embeds in one embedder call.
const importBatch = 32

// Import reads Export's JSON Lines (or bare {"question","answer"} lines) and learns each record,
// as Learn would but synchronously. Fields a record leaves empty are taken from def (use it for
// the tenant and model of a plain FAQ file). progress, when set, is called after each batch with
// the records imported so far. A malformed line stops the import with its line number; what
// came before it stays imported.
func (s *Stage) Import(ctx context.Context, r io.Reader, def Record, progress func(done int)) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	done := 0
	var batch []Record
	var lines []int
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := s.importBatch(ctx, batch, lines); err != nil {
			return err
		}
		done += len(batch)
		batch, lines = batch[:0], lines[:0]
		if progress != nil {
			progress(done)
		}
		return nil
	}
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		var rec Record
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			return done, fmt.Errorf("line %d: %w", line, err)
		}
		rec.Tenant = cmp.Or(rec.Tenant, def.Tenant)
		rec.Model = cmp.Or(rec.Model, def.Model)
		if rec.Joules == 0 {
			rec.Joules = def.Joules
		}
		switch {
		case rec.Model == "":
			return done, fmt.Errorf("line %d: no model (give one in the file or as the default)", line)
		case strings.TrimSpace(rec.Question) == "" || strings.TrimSpace(rec.Answer) == "":
			return done, fmt.Errorf("line %d: question and answer are required", line)
		}
		batch = append(batch, rec)
		lines = append(lines, line)
		if len(batch) == importBatch {
			if err := flush(); err != nil {
				return done, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return done, err
	}
	return done, flush()
}

func (s *Stage) importBatch(ctx context.Context, recs []Record, lines []int) error {
	texts := make([]string, 0, 2*len(recs))
	qs := make([]query, len(recs))
	for i, r := range recs {
		q := query{question: r.Question, context: cmp.Or(r.Context, contextOf(r.Question)), params: paramsOf(r.Stop)}
		qs[i] = q
		texts = append(texts, q.question, q.context)
	}
	vs, _, err := s.emb.Embed(ctx, texts) // an offline import bills no request
	if err != nil {
		return fmt.Errorf("lines %d-%d: embedding: %w", lines[0], lines[len(lines)-1], err)
	}
	if len(vs) != len(texts) {
		return fmt.Errorf("lines %d-%d: embedder returned %d vectors for %d texts", lines[0], lines[len(lines)-1], len(vs), len(texts))
	}
	for i, r := range recs {
		v, ok := join(vs[2*i], vs[2*i+1])
		if !ok {
			return fmt.Errorf("line %d: nothing to embed", lines[i])
		}
		col, err := s.collectionFor(r.Tenant, r.Model, len(v))
		if err != nil {
			return fmt.Errorf("line %d: %w", lines[i], err)
		}
		created := r.Created
		if created == 0 {
			created = time.Now().Unix()
		}
		e := &entry{
			id: entryID(qs[i]), vec: v, sketch: s.sketchOf(v), question: qs[i].question, context: qs[i].context,
			params: qs[i].params, answer: r.Answer, joules: r.Joules, ctok: r.CompletionTokens, created: created,
		}
		if err := s.add(ctx, col, e); err != nil {
			return fmt.Errorf("line %d: %w", lines[i], err)
		}
	}
	return nil
}
