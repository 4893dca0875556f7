package cache

import (
	"context"
	"encoding/json"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// Remote is a shared tier behind the in-process LRU, where several replicas find each other's
// answers (cluster.Cache, on Redis). Keys are scoped by tenant as well as hashed with it. Get
// returns false on a miss and whenever the tier cannot answer; Set does nothing then: a remote
// tier that went away degrades the stage to its LRU, it never fails a call.
type Remote interface {
	Get(ctx context.Context, tenant, key string) ([]byte, bool)
	Set(ctx context.Context, tenant, key string, val []byte, ttl time.Duration)
}

// NearTTL is how long an answer stays in the in-process LRU when a remote tier is set: the LRU
// is then a near cache in front of the shared one.
const NearTTL = time.Minute

// remoteTimeout bounds one remote lookup or store within a call.
const remoteTimeout = 500 * time.Millisecond

// stored is an entry's form in the remote tier: the answer's JSON (or the vectors) and what
// producing it cost, which a hit reports as saved.
type stored struct {
	Answer       *cascade.Answer `json:"a,omitempty"`
	Vectors      [][]float32     `json:"v,omitempty"`
	PromptTokens int             `json:"p,omitempty"`
	Cost         float64         `json:"c"`
}

func (s *Stage) remoteGet(ctx context.Context, tenant, key string) (entry, bool) {
	if s.remote == nil {
		return entry{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, remoteTimeout)
	defer cancel()
	b, ok := s.remote.Get(ctx, tenant, key)
	if !ok {
		return entry{}, false
	}
	var st stored
	if err := json.Unmarshal(b, &st); err != nil {
		return entry{}, false
	}
	var ent entry
	switch {
	case st.Answer != nil:
		cost := 0.0 // a hit saves nothing by a cost that is not positive
		if st.Cost > 0 {
			cost = st.Cost
		}
		ent.ans, ent.size = keep(st.Answer, cost), st.Answer.Size()
	case st.Vectors != nil:
		ent.emb = &cascade.Embeddings{Vectors: st.Vectors, PromptTokens: st.PromptTokens}
		ent.emb.Energy.Saved = st.Cost
		ent.size = embedSize(ent.emb)
	default:
		return entry{}, false
	}
	s.add(key, ent) // one over this replica's bound is served, not kept near
	return ent, true
}

func (s *Stage) remoteSet(tenant, key string, st stored) {
	if s.remote == nil {
		return
	}
	b, err := json.Marshal(st)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	s.remote.Set(ctx, tenant, key, b, s.ttl)
}
