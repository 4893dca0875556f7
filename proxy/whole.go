package proxy

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync/atomic"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// wholeMemoMax bounds the encoded answer a chat exchange remembers (wholeMemo), so that the
// decoded-body memo's entries hold at most about that much more each.
const wholeMemoMax = 8 << 10

// wholeMemo is a stored answer's whole body (chatExchange.Whole) but for its id and created,
// which a cache answers anew at each hit: encoding/json's own bytes, cut around those two values
// where they were encoded. It is the body of every answer that shares the stored answer's
// choices and usage (the same arrays, which a stored answer never mutates), model and system
// fingerprint: the fields encoded after created are only those (TestWholeMemoFields holds
// cascade.Answer to that), and model is compared by value.
type wholeMemo struct {
	choices     *cascade.Choice // the first of the stored answer's choices
	n           int
	usage       *cascade.Usage
	model       string
	fingerprint string
	mid         []byte // `","model":` the model `,"created":`
	rest        []byte // what follows created, to the end
}

// wholeHead is how the body of a whole chat answer begins, up to its id's value.
const wholeHead = `{"object":"chat.completion","id":"`

// plainID says id is encoded as itself between quotes: letters, digits, '-', '_' and '.' only
// (cascade.NewID's ids are).
func plainID(id string) bool {
	for i := range len(id) {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// of says the memo is ans's body but for its id and created.
func (m *wholeMemo) of(ans *cascade.Answer) bool {
	return m.n > 0 && len(ans.Choices) == m.n && &ans.Choices[0] == m.choices && ans.Usage == m.usage && ans.Model == m.model &&
		ans.SystemFingerprint == m.fingerprint
}

// body is ans's whole body, with its own id and created.
func (m *wholeMemo) body(ans *cascade.Answer) []byte {
	b := make([]byte, 0, len(wholeHead)+len(ans.ID)+len(m.mid)+20+len(m.rest))
	b = append(b, wholeHead...)
	b = append(b, ans.ID...)
	b = append(b, m.mid...)
	b = strconv.AppendInt(b, ans.Created, 10)
	return append(b, m.rest...)
}

// newWholeMemo cuts body, ans's whole body as encoding/json made it, around its id and created;
// nil when it does not read as expected or is too large to keep.
func newWholeMemo(ans *cascade.Answer, body []byte) *wholeMemo {
	if len(body) > wholeMemoMax || len(ans.Choices) == 0 || !plainID(ans.ID) {
		return nil
	}
	rest, ok := bytes.CutPrefix(body, []byte(wholeHead))
	if !ok {
		return nil
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(ans.ID)); !ok {
		return nil
	}
	model, err := json.Marshal(ans.Model)
	if err != nil {
		return nil
	}
	mid := append(append([]byte(`","model":`), model...), `,"created":`...)
	if rest, ok = bytes.CutPrefix(rest, mid); !ok {
		return nil
	}
	if rest, ok = bytes.CutPrefix(rest, strconv.AppendInt(nil, ans.Created, 10)); !ok {
		return nil
	}
	return &wholeMemo{choices: &ans.Choices[0], n: len(ans.Choices), usage: ans.Usage, model: ans.Model,
		fingerprint: ans.SystemFingerprint, mid: mid, rest: bytes.Clone(rest)}
}

// wholeMemos is where a chat exchange keeps the last whole body it encoded for a stored answer:
// the calls that send the same bytes (they share the exchange, decodedChats) get the same
// stored answer from the cache, with an id and created of their own. The first call of an
// exchange only marks it seen: a body sent once (most that a backend answers) pays for no memo.
type wholeMemos struct{ last atomic.Pointer[wholeMemo] }

// seenOnce marks an exchange whose whole answer was encoded once.
var seenOnce = new(wholeMemo)

// whole is ans's whole body: from the memo when it is ans's, else encoded, and remembered when
// the exchange was answered before and ans is a stage's stored answer (no backend made it).
func (w *wholeMemos) whole(ans *cascade.Answer) ([]byte, error) {
	m := w.last.Load()
	if m != nil && m.of(ans) && plainID(ans.ID) {
		return m.body(ans), nil
	}
	body, err := json.Marshal(completion{Object: "chat.completion", Answer: ans})
	switch {
	case err != nil:
	case m == nil:
		w.last.CompareAndSwap(nil, seenOnce)
	case ans.Backend == "":
		if m := newWholeMemo(ans, body); m != nil {
			w.last.Store(m)
		}
	}
	return body, err
}
