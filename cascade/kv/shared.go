package kv

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"time"
)

// Shared carries learned entries between replicas (cluster.KVStream, a Redis Stream): each
// replica publishes what it learns, and follows what the others learn into its own index, so
// an answer learned on one replica answers on all of them. Seeded pairs are not shared: every
// replica loads the same seed files.
type Shared interface {
	// Publish hands one learned entry to the other replicas; an error drops it (the entry
	// stays on this replica).
	Publish(ctx context.Context, entry []byte) error
	// Follow calls apply for each entry another replica published, oldest first, those
	// already published at start included (a new replica starts warm), until ctx ends. It
	// rides out the store's outages itself.
	Follow(ctx context.Context, apply func(entry []byte))
}

// sharing is the stage's link to the other replicas.
type sharing struct {
	sh     Shared
	cancel context.CancelFunc
	done   chan struct{}
}

// sharedEntry is a learned entry on the wire.
type sharedEntry struct {
	Tenant   string  `json:"t"`
	Model    string  `json:"m"`
	Vec      string  `json:"v"` // little-endian float32s, base64
	Question string  `json:"q"`
	Context  string  `json:"c,omitempty"`
	Params   string  `json:"p,omitempty"`
	Answer   string  `json:"a"`
	Joules   float64 `json:"j"`
	CTok     int     `json:"k,omitempty"`
	Created  int64   `json:"cr"`
}

// Share links the stage to the other replicas through sh: from now on what it learns is
// published, and what they learned (before and after) is indexed here. Call it once, before
// serving; Close stops following.
func (s *Stage) Share(sh Shared) {
	ctx, cancel := context.WithCancel(context.Background())
	sg := &sharing{sh: sh, cancel: cancel, done: make(chan struct{})}
	s.shared = sg
	go func() {
		defer close(sg.done)
		sh.Follow(ctx, func(b []byte) {
			if err := s.applyShared(ctx, b); err != nil && ctx.Err() == nil {
				s.log.Warn().Err(err).Msg("kv: an entry from another replica was not indexed")
			}
		})
	}()
}

// publish hands an entry this replica learned to the others.
func (s *Stage) publish(tenant, model string, e *entry) {
	if s.shared == nil {
		return
	}
	vb := make([]byte, 4*len(e.vec))
	for i, f := range e.vec {
		binary.LittleEndian.PutUint32(vb[4*i:], math.Float32bits(f))
	}
	b, err := json.Marshal(sharedEntry{Tenant: tenant, Model: model, Vec: base64.StdEncoding.EncodeToString(vb),
		Question: e.question, Context: e.context, Params: e.params, Answer: e.answer, Joules: e.joules, CTok: e.ctok, Created: e.created})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.shared.sh.Publish(ctx, b); err != nil {
		s.log.Debug().Err(err).Msg("kv: learned entry not shared")
	}
}

// applyShared indexes an entry another replica learned.
func (s *Stage) applyShared(ctx context.Context, b []byte) error {
	var se sharedEntry
	if err := json.Unmarshal(b, &se); err != nil {
		return err
	}
	vb, err := base64.StdEncoding.DecodeString(se.Vec)
	if err != nil || len(vb) == 0 || len(vb)%4 != 0 {
		return errors.New("bad vector")
	}
	vec := make([]float32, len(vb)/4)
	for i := range vec {
		vec[i] = math.Float32frombits(binary.LittleEndian.Uint32(vb[4*i:]))
	}
	col, err := s.collectionFor(se.Tenant, se.Model, len(vec))
	if err != nil {
		return err
	}
	q := query{question: se.Question, context: se.Context, params: se.Params}
	if len(q.question)+len(q.context)+len(q.params)+len(se.Answer) > s.maxEntry {
		s.stats.tooLarge.Add(1) // another replica's bound is larger: not kept here
		return nil
	}
	return s.add(ctx, col, &entry{id: entryID(q), vec: vec, sketch: s.sketchOf(vec), question: se.Question,
		context: se.Context, params: se.Params, answer: se.Answer, joules: se.Joules, ctok: se.CTok, created: se.Created})
}

// stopSharing stops following the other replicas.
func (s *Stage) stopSharing() {
	if s.shared == nil {
		return
	}
	s.shared.cancel()
	<-s.shared.done
}
