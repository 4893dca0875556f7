package cascade

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"io"
	"slices"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// Why this is hand-written (issue 12): end to end (scripts/bench-ab.sh, cache hits) it beats the
// library pipeline below (referenceCanonicalKey in key_ref_test.go) by far more than the 5 % a
// hand-written hot path has to earn; the figures are in the commit that made it. It is held to
// that reference by key_ref_test.go (cases, every prefix, generated bodies, a fuzz target).
//
// The canonicaliser turns a request body into the bytes the key hashes without decoding it into
// map[string]any. It must produce exactly what the first implementation produced:
//
//	json.NewDecoder(raw).UseNumber().Decode(&map[string]any) → drop fieldsNotInKey → normalise
//	numbers → json.Marshal
//
// so that keys, and with them the cache, the kv store and receipts, survive the change. That
// pipeline's behaviour, reproduced here on purpose:
//
//   - Only the first JSON value counts; leading whitespace is skipped and whatever follows the
//     value is ignored (json.Decoder reads one value and stops).
//   - A body that is not an object is hashed raw, except a leading `null`, which decodes into a
//     nil map and hashes as "null".
//   - Syntax errors anywhere in the value, and nesting deeper than encoding/json's 10000 levels,
//     make the body malformed: it is hashed raw.
//   - Object members are ordered by their decoded key, compared bytewise (so "a" and "\u0061" are
//     one key). Duplicate keys keep the last value, as map decoding does. fieldsNotInKey are
//     dropped from the top level only, after decoding their names.
//   - Strings are decoded the way encoding/json decodes them (invalid UTF-8 and unpaired
//     surrogates become U+FFFD) and re-encoded the way json.Marshal encodes them (HTML escaping
//     of <, > and &, \u2028 and \u2029, \b \f \n \r \t, other control bytes as \u00XX).
//   - Numbers are normalised by canonNumber, which is the old normalizeNumbers.
//   - Insignificant whitespace is dropped.
//
// It works in two passes over a flat node list: parse validates the whole value and records
// every value as a node (pre-order), then emit walks the nodes and writes canonical JSON into
// the hash in chunks. Both passes are linear in the body size, except sorting each object's
// members. No pass allocates once the pooled buffers have grown.

// maxCanonDepth is encoding/json's maxNestingDepth: deeper bodies are syntax errors there.
const maxCanonDepth = 10000

// canonFlush is how much canonical output is buffered before it is written to the hash.
const canonFlush = 4 << 10

// Pooled canonicalisers keep buffers up to these sizes; bigger ones are left to the collector.
const (
	canonMaxPooledBytes = 1 << 20
	canonMaxPooledNodes = 1 << 15
)

const (
	cnObject uint8 = iota + 1
	cnArray
	cnString
	cnNumber
	cnLiteral
)

const (
	// cfPlain marks a string whose canonical encoding is its raw text: no escapes, no bytes
	// that json.Marshal would escape, valid UTF-8. Its decoded value is its raw content.
	cfPlain uint8 = 1 << iota
	// cfSmallInt marks an integer literal of at most 18 digits: it fits int64, so its
	// canonical form is itself (but "-0" is "0").
	cfSmallInt
)

// cnode is one JSON value. Objects are followed by their members as key node, value subtree;
// arrays by their elements.
type cnode struct {
	kind, flags uint8
	start, end  int // raw span of a scalar; strings include their quotes
	// after is, for a container, the index of the node after its subtree. For a key that is
	// not plain it is the start of its decoded text in the arena.
	after int
	// n is, for a container, its member or element count. For a key that is not plain it is
	// the end of its decoded text in the arena.
	n int
}

type canonicaliser struct {
	nodes   []cnode
	arena   []byte    // decoded keys that are not plain
	members []int     // stack of per-object member lists: key nodes, each followed by its value
	out     []byte    // canonical output not yet written
	w       io.Writer // where out is flushed: a hash or a bytes.Buffer, whose Write never fails
	h       hash.Hash
	sum     []byte
}

var canonPool = sync.Pool{New: func() any {
	h := sha256.New()
	return &canonicaliser{h: h, sum: make([]byte, 0, sha256.Size), out: make([]byte, 0, 512)}
}}

func canonicalKey(tenant string, raw []byte) string {
	c := canonPool.Get().(*canonicaliser)
	c.h.Reset()
	c.writeKeyInput(c.h, tenant, raw)
	c.sum = c.h.Sum(c.sum[:0])
	var hx [2 * sha256.Size]byte
	const digits = "0123456789abcdef"
	for i, b := range c.sum {
		hx[2*i], hx[2*i+1] = digits[b>>4], digits[b&0xf]
	}
	c.release()
	return string(hx[:])
}

func (c *canonicaliser) release() {
	if cap(c.nodes) > canonMaxPooledNodes || cap(c.members) > canonMaxPooledNodes ||
		cap(c.arena) > canonMaxPooledBytes || cap(c.out) > canonMaxPooledBytes {
		return
	}
	c.w = nil
	canonPool.Put(c)
}

// writeKeyInput writes what the key hashes: a prefix with the tenant, then the canonical body
// or, when the body is malformed or not an object, the raw body.
func (c *canonicaliser) writeKeyInput(w io.Writer, tenant string, raw []byte) {
	c.w = w
	out := append(c.out[:0], "eoc-key-v1\x00"...)
	out = strconv.AppendInt(out, int64(len(tenant)), 10)
	out = append(out, ':')
	out = append(out, tenant...)
	c.out = append(out, 0)

	p := skipSpace(raw, 0)
	switch {
	case len(raw)-p >= 4 && string(raw[p:p+4]) == "null":
		c.out = append(c.out, "null"...) // json.Marshal of the nil map
	case p < len(raw) && raw[p] == '{':
		c.nodes, c.arena, c.members = c.nodes[:0], c.arena[:0], c.members[:0]
		if c.parseObject(raw, p, 1) >= 0 {
			c.emit(raw, 0, true)
			break
		}
		fallthrough
	default:
		c.flush()
		_, _ = w.Write(raw)
	}
	c.flush()
}

func (c *canonicaliser) flush() {
	if len(c.out) > 0 {
		_, _ = c.w.Write(c.out)
		c.out = c.out[:0]
	}
}

func skipSpace(raw []byte, p int) int {
	for p < len(raw) {
		switch raw[p] {
		case ' ', '\t', '\n', '\r':
			p++
		default:
			return p
		}
	}
	return p
}

// parse records the value at raw[p:] (after optional whitespace) and returns the offset after
// it, or -1 if it is malformed. depth counts the containers around the value.
func (c *canonicaliser) parse(raw []byte, p, depth int) int {
	p = skipSpace(raw, p)
	if p >= len(raw) {
		return -1
	}
	switch b := raw[p]; b {
	case '{':
		return c.parseObject(raw, p, depth+1)
	case '[':
		return c.parseArray(raw, p, depth+1)
	case '"':
		return c.parseString(raw, p, false)
	case 't':
		return c.parseLiteral(raw, p, "true")
	case 'f':
		return c.parseLiteral(raw, p, "false")
	case 'n':
		return c.parseLiteral(raw, p, "null")
	default:
		if b == '-' || '0' <= b && b <= '9' {
			return c.parseNumber(raw, p)
		}
		return -1
	}
}

func (c *canonicaliser) parseObject(raw []byte, p, depth int) int {
	if depth > maxCanonDepth {
		return -1
	}
	idx := len(c.nodes)
	c.nodes = append(c.nodes, cnode{kind: cnObject})
	n := 0
	p = skipSpace(raw, p+1)
	if p < len(raw) && raw[p] == '}' {
		p++
	} else {
		for {
			if p >= len(raw) || raw[p] != '"' {
				return -1
			}
			if p = c.parseString(raw, p, true); p < 0 {
				return -1
			}
			p = skipSpace(raw, p)
			if p >= len(raw) || raw[p] != ':' {
				return -1
			}
			if p = c.parse(raw, p+1, depth); p < 0 {
				return -1
			}
			n++
			p = skipSpace(raw, p)
			if p >= len(raw) {
				return -1
			}
			if raw[p] == ',' {
				p = skipSpace(raw, p+1)
				continue
			}
			if raw[p] != '}' {
				return -1
			}
			p++
			break
		}
	}
	c.nodes[idx].n = n
	c.nodes[idx].after = len(c.nodes)
	return p
}

func (c *canonicaliser) parseArray(raw []byte, p, depth int) int {
	if depth > maxCanonDepth {
		return -1
	}
	idx := len(c.nodes)
	c.nodes = append(c.nodes, cnode{kind: cnArray})
	n := 0
	p = skipSpace(raw, p+1)
	if p < len(raw) && raw[p] == ']' {
		p++
	} else {
		for {
			if p = c.parse(raw, p, depth); p < 0 {
				return -1
			}
			n++
			p = skipSpace(raw, p)
			if p >= len(raw) {
				return -1
			}
			if raw[p] == ',' {
				p++
				continue
			}
			if raw[p] != ']' {
				return -1
			}
			p++
			break
		}
	}
	c.nodes[idx].n = n
	c.nodes[idx].after = len(c.nodes)
	return p
}

// parseString records the string starting with the quote at raw[p]. A key that is not plain
// is decoded into the arena now, so members can be sorted by their decoded keys.
func (c *canonicaliser) parseString(raw []byte, p int, key bool) int {
	start := p
	plain := true
	p++
	for {
		p = safeRun(raw, p)
		if p >= len(raw) {
			return -1
		}
		b := raw[p]
		if b == '"' {
			break
		}
		if b < utf8.RuneSelf {
			if b < 0x20 {
				return -1
			}
			plain = false
			p++
			if b != '\\' { // <, >, &
				continue
			}
			if p >= len(raw) {
				return -1
			}
			switch raw[p] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p++
			case 'u':
				if len(raw)-p < 5 || !isHex(raw[p+1]) || !isHex(raw[p+2]) || !isHex(raw[p+3]) || !isHex(raw[p+4]) {
					return -1
				}
				p += 5
			default:
				return -1
			}
			continue
		}
		r, size := utf8.DecodeRune(raw[p:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			plain = false
		}
		p += size
	}
	p++ // the closing quote
	nd := cnode{kind: cnString, start: start, end: p}
	if plain {
		nd.flags = cfPlain
	} else if key {
		nd.after = len(c.arena)
		c.arena = appendUnquoted(c.arena, raw[start+1:p-1])
		nd.n = len(c.arena)
	}
	c.nodes = append(c.nodes, nd)
	return p
}

func (c *canonicaliser) parseNumber(raw []byte, p int) int {
	start := p
	if raw[p] == '-' {
		p++
	}
	digits := p
	switch {
	case p >= len(raw):
		return -1
	case raw[p] == '0':
		p++
	case '1' <= raw[p] && raw[p] <= '9':
		p = skipDigits(raw, p+1)
	default:
		return -1
	}
	var flags uint8
	if p-digits <= 18 {
		flags = cfSmallInt
	}
	if p < len(raw) && raw[p] == '.' {
		flags = 0
		p++
		if p >= len(raw) || !isDigit(raw[p]) {
			return -1
		}
		p = skipDigits(raw, p+1)
	}
	if p < len(raw) && (raw[p] == 'e' || raw[p] == 'E') {
		flags = 0
		p++
		if p < len(raw) && (raw[p] == '+' || raw[p] == '-') {
			p++
		}
		if p >= len(raw) || !isDigit(raw[p]) {
			return -1
		}
		p = skipDigits(raw, p+1)
	}
	c.nodes = append(c.nodes, cnode{kind: cnNumber, flags: flags, start: start, end: p})
	return p
}

func (c *canonicaliser) parseLiteral(raw []byte, p int, lit string) int {
	if len(raw)-p < len(lit) || string(raw[p:p+len(lit)]) != lit {
		return -1
	}
	c.nodes = append(c.nodes, cnode{kind: cnLiteral, start: p, end: p + len(lit)})
	return p + len(lit)
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

func isHex(b byte) bool { return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F' }

func skipDigits(raw []byte, p int) int {
	for p < len(raw) && isDigit(raw[p]) {
		p++
	}
	return p
}

// emit writes the canonical form of node i and returns the index of the node after it.
func (c *canonicaliser) emit(raw []byte, i int, top bool) int {
	if len(c.out) >= canonFlush {
		c.flush()
	}
	nd := &c.nodes[i]
	switch nd.kind {
	case cnObject:
		return c.emitObject(raw, i, top)
	case cnArray:
		n := nd.n
		c.out = append(c.out, '[')
		j := i + 1
		for k := 0; k < n; k++ {
			if k > 0 {
				c.out = append(c.out, ',')
			}
			j = c.emit(raw, j, false)
		}
		c.out = append(c.out, ']')
		return j
	case cnString:
		if nd.flags&cfPlain != 0 {
			c.out = append(c.out, raw[nd.start:nd.end]...)
		} else {
			c.out = appendCanonString(c.out, raw[nd.start+1:nd.end-1])
		}
	case cnNumber:
		lit := raw[nd.start:nd.end]
		if nd.flags&cfSmallInt != 0 {
			if len(lit) == 2 && lit[0] == '-' && lit[1] == '0' {
				c.out = append(c.out, '0')
			} else {
				c.out = append(c.out, lit...)
			}
		} else {
			c.out = canonNumber(c.out, string(lit))
		}
	default: // cnLiteral
		c.out = append(c.out, raw[nd.start:nd.end]...)
	}
	return i + 1
}

func (c *canonicaliser) emitObject(raw []byte, i int, top bool) int {
	nd := c.nodes[i]
	base := len(c.members)
	j := i + 1
	for k := 0; k < nd.n; k++ {
		if !top || !notInKey(c.decodedKey(raw, j)) {
			c.members = append(c.members, j)
		}
		if v := &c.nodes[j+1]; v.kind == cnObject || v.kind == cnArray {
			j = v.after
		} else {
			j += 2
		}
	}
	end := len(c.members)
	c.sortMembers(raw, c.members[base:end])
	c.out = append(c.out, '{')
	first := true
	for k := base; k < end; k++ {
		m := c.members[k]
		if k+1 < end && bytes.Equal(c.decodedKey(raw, c.members[k+1]), c.decodedKey(raw, m)) {
			continue // a later duplicate wins
		}
		if !first {
			c.out = append(c.out, ',')
		}
		first = false
		if kn := &c.nodes[m]; kn.flags&cfPlain != 0 {
			c.out = append(c.out, raw[kn.start:kn.end]...)
		} else {
			c.out = appendCanonString(c.out, raw[kn.start+1:kn.end-1])
		}
		c.out = append(c.out, ':')
		c.emit(raw, m+1, false)
	}
	c.out = append(c.out, '}')
	c.members = c.members[:base]
	return nd.after
}

// notInKey reports whether a decoded top-level key is one of fieldsNotInKey, without hashing it.
func notInKey(k []byte) bool {
	switch string(k) {
	case "stream", "stream_options", "user", "metadata", "store":
		return true
	}
	return false
}

func (c *canonicaliser) decodedKey(raw []byte, i int) []byte {
	nd := &c.nodes[i]
	if nd.flags&cfPlain != 0 {
		return raw[nd.start+1 : nd.end-1]
	}
	return c.arena[nd.after:nd.n]
}

// sortMembers orders key nodes by decoded key, then by position, so the last of equal keys is
// the last of its run.
func (c *canonicaliser) sortMembers(raw []byte, ms []int) {
	cmp := func(a, b int) int {
		if r := bytes.Compare(c.decodedKey(raw, a), c.decodedKey(raw, b)); r != 0 {
			return r
		}
		return a - b
	}
	if len(ms) > 12 {
		slices.SortFunc(ms, cmp)
		return
	}
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0 && cmp(ms[j-1], ms[j]) > 0; j-- {
			ms[j-1], ms[j] = ms[j], ms[j-1]
		}
	}
}

// canonNumber appends the normalised form of a JSON number literal: integers in int64 range as
// integers, floats equal to an integer below 1e18 in magnitude as that integer, other floats in
// the shortest 'g' form, and literals out of float64 range unchanged. It is the old
// normalizeNumbers; ParseInt is skipped for literals with a fraction or an exponent, where it
// can only fail.
func canonNumber(dst []byte, s string) []byte {
	isInt := true
	for i := 0; i < len(s); i++ {
		if b := s[i]; b == '.' || b == 'e' || b == 'E' {
			isInt = false
			break
		}
	}
	if isInt {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return strconv.AppendInt(dst, i, 10)
		}
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f == float64(int64(f)) && f < 1e18 && f > -1e18 {
			return strconv.AppendInt(dst, int64(f), 10)
		}
		return strconv.AppendFloat(dst, f, 'g', -1, 64)
	}
	return append(dst, s...)
}

// appendUnquoted appends the decoded content of a syntactically valid JSON string (without its
// quotes) exactly as encoding/json decodes it: an unpaired surrogate escape and each byte of
// invalid UTF-8 become U+FFFD.
func appendUnquoted(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		b := s[i]
		switch {
		case b == '\\':
			switch e := s[i+1]; e {
			case 'u':
				r := hex4(s[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					r1 := rune(-1)
					if len(s)-i >= 6 && s[i] == '\\' && s[i+1] == 'u' {
						r1 = hex4(s[i+2:])
					}
					if d := utf16.DecodeRune(r, r1); d != utf8.RuneError {
						i += 6
						dst = utf8.AppendRune(dst, d)
						continue
					}
					r = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, r)
				continue
			case 'b':
				b = '\b'
			case 'f':
				b = '\f'
			case 'n':
				b = '\n'
			case 'r':
				b = '\r'
			case 't':
				b = '\t'
			default: // " \ /
				b = e
			}
			dst = append(dst, b)
			i += 2
		case b < utf8.RuneSelf:
			dst = append(dst, b)
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			dst = utf8.AppendRune(dst, r)
			i += size
		}
	}
	return dst
}

// hex4 decodes four hex digits already checked by parseString, or returns -1.
func hex4(s []byte) rune {
	if len(s) < 4 {
		return -1
	}
	var r rune
	for _, b := range s[:4] {
		switch {
		case '0' <= b && b <= '9':
			b -= '0'
		case 'a' <= b && b <= 'f':
			b = b - 'a' + 10
		case 'A' <= b && b <= 'F':
			b = b - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(b)
	}
	return r
}

// appendCanonString appends the canonical encoding of the raw content of a syntactically valid
// JSON string (without its quotes): json.Marshal (HTML escaping on) of the string encoding/json
// decodes it to, in one pass. Escapes are decoded as appendUnquoted decodes them.
func appendCanonString(dst, s []byte) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		j := safeRun(s, i)
		dst = append(dst, s[i:j]...)
		if i = j; i >= len(s) {
			break
		}
		switch b := s[i]; {
		case b == '\\':
			var r rune
			switch e := s[i+1]; e {
			case 'u':
				r = hex4(s[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					r1 := rune(-1)
					if len(s)-i >= 6 && s[i] == '\\' && s[i+1] == 'u' {
						r1 = hex4(s[i+2:])
					}
					if r = utf16.DecodeRune(r, r1); r != utf8.RuneError {
						i += 6
					}
				}
			case 'b':
				r, i = '\b', i+2
			case 'f':
				r, i = '\f', i+2
			case 'n':
				r, i = '\n', i+2
			case 'r':
				r, i = '\r', i+2
			case 't':
				r, i = '\t', i+2
			default: // " \ /
				r, i = rune(e), i+2
			}
			dst = appendCanonRune(dst, r)
		case b < utf8.RuneSelf: // <, >, & (control bytes are not valid here)
			dst = appendCanonRune(dst, rune(b))
			i++
		default:
			// Invalid UTF-8 decodes to U+FFFD, which is valid and encodes as itself.
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError || r == '\u2028' || r == '\u2029' {
				dst = appendCanonRune(dst, r)
			} else {
				dst = append(dst, s[i:i+size]...)
			}
			i += size
		}
	}
	return append(dst, '"')
}

// appendCanonRune appends r as json.Marshal writes it inside a string (HTML escaping on).
func appendCanonRune(dst []byte, r rune) []byte {
	const hexDigits = "0123456789abcdef"
	if r < utf8.RuneSelf {
		switch b := byte(r); {
		case htmlSafe[b]:
			return append(dst, b)
		case b == '\\' || b == '"':
			return append(dst, '\\', b)
		case b == '\b':
			return append(dst, '\\', 'b')
		case b == '\f':
			return append(dst, '\\', 'f')
		case b == '\n':
			return append(dst, '\\', 'n')
		case b == '\r':
			return append(dst, '\\', 'r')
		case b == '\t':
			return append(dst, '\\', 't')
		default: // other control bytes, <, >, &
			return append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
		}
	}
	if r == '\u2028' || r == '\u2029' {
		return append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
	}
	return utf8.AppendRune(dst, r)
}

// safeRun returns the index of the first byte at or after i that json.Marshal does not write
// as it is: not printable ASCII, or one of " \\ < > &. It looks at eight bytes at a time.
func safeRun(s []byte, i int) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	for len(s)-i >= 8 {
		x := binary.LittleEndian.Uint64(s[i:])
		q, bs, lt, gt, amp := x^('"'*lo), x^('\\'*lo), x^('<'*lo), x^('>'*lo), x^('&'*lo)
		m := x | (x-0x20*lo)&^x | // bytes >= 0x80, bytes < 0x20
			(q-lo)&^q | (bs-lo)&^bs | (lt-lo)&^lt | (gt-lo)&^gt | (amp-lo)&^amp // zero bytes of the xors
		if m&hi != 0 {
			break
		}
		i += 8
	}
	for i < len(s) && htmlSafe[s[i]] {
		i++
	}
	return i
}

// htmlSafe is encoding/json's htmlSafeSet, widened to all bytes: the ASCII bytes json.Marshal
// writes as they are.
var htmlSafe = func() (t [256]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
	}
	return t
}()
