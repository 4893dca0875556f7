package proxy

import (
	"bytes"
	"hash/maphash"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// The decoded-body memo's bounds: at most decodedBodies entries of at most decodedMaxBody bytes,
// so it holds at most about 2 × 8 MiB (each body, and the strings decoded from it).
const (
	decodedBodies  = 1024
	decodedMaxBody = 8 << 10
)

// decodedChats remembers what decode made of recent chat bodies, byte for byte. A call whose
// body is the same bytes as one its key (tenant) sent before (a retry, the same prompt from the
// same client: what a cache hit usually is) takes that decoded request instead of unmarshalling
// and validating again. Only bodies that decoded and validated are kept: decode and validate
// read nothing but the body, so the same bytes always get the same answer. Entries are per
// tenant, as the cache's are: one key cannot learn from a faster decode that another key sent
// the same bytes.
//
// It stays because it earns more than the 5 % a hand-written hot path has to, end to end
// (scripts/bench-ab.sh -phases cache; the figures are in the commit that made it).
//
// The memo's requests are shared between calls: stages read them and must not modify them
// (cascade.Request says so); the race detector checks it in cmd's TestSameBodyConcurrently.
type decodedChats struct {
	hash func(tenant string, body []byte) uint64 // tests make it collide
	lru  *lru.Cache[uint64, *decodedChat]
}

type decodedChat struct {
	tenant string
	body   []byte
	// req is the cascade's request of every call with these bytes, but for what each call sets
	// itself (decode): its key is computed once, when the body is first decoded.
	req cascade.Request
	x   chatExchange // of req.Chat and body: the exchange every call with these bytes shares
	// parsed is what decodeChat reads the body into: req.Chat, and the reasoning switches.
	parsed chatBody
	// msgs backs req.Chat.Messages for a body of up to len(msgs) messages, so that decoding
	// them grows no slice.
	msgs [decodedMessages]cascade.Message
}

// decodedMessages is how many messages a decodedChat holds without an allocation of their own:
// a system prompt and the question.
const decodedMessages = 2

func newDecodedChats() *decodedChats {
	seed := maphash.MakeSeed()
	c, err := lru.New[uint64, *decodedChat](decodedBodies)
	if err != nil {
		panic(err) // only for a size below 1
	}
	// The tenant's hash and the body's, apart: an entry is taken only when both are equal, so a
	// collision costs a lookup, never a wrong answer.
	hash := func(tenant string, body []byte) uint64 {
		return maphash.String(seed, tenant)*31 ^ maphash.Bytes(seed, body)
	}
	return &decodedChats{hash: hash, lru: c}
}

// get returns the exchange of the request decoded from the same bytes as body for tenant, if one
// is remembered, and the hash for put. Its raw body is the remembered copy of those bytes.
func (d *decodedChats) get(tenant string, body []byte) (*chatExchange, uint64) {
	if len(body) > decodedMaxBody {
		return nil, 0 // never kept: not worth hashing
	}
	h := d.hash(tenant, body)
	if e, ok := d.lru.Get(h); ok && e.tenant == tenant && bytes.Equal(e.body, body) {
		return &e.x, h
	}
	return nil, h
}

// newDecodedChat is the entry of tenant's body, its request to be decoded into chat: the call
// that decodes it uses its exchange, and put keeps it for the calls that send the same bytes.
func newDecodedChat(tenant string, body []byte) *decodedChat {
	e := &decodedChat{tenant: tenant, body: body}
	e.req = cascade.Request{Tenant: tenant, Raw: body}
	e.req.Chat.Messages = e.msgs[:0]
	e.parsed.ChatRequest = &e.req.Chat
	e.x = chatExchange{chat: &e.req.Chat, raw: e.body, req: &e.req}
	return e
}

// put remembers e, whose request was decoded and validated from its body, whose hash is h.
// Nothing may modify e's body or request afterwards.
func (d *decodedChats) put(h uint64, e *decodedChat) {
	if len(e.body) > decodedMaxBody {
		return
	}
	d.lru.Add(h, e)
}
