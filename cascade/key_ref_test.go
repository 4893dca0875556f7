package cascade

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// referenceCanonicalKey is the first implementation of the key, kept verbatim: the canonicaliser
// must produce the same key for every body.
func referenceCanonicalKey(tenant string, raw json.RawMessage) string {
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "eoc-key-v1\x00%d:%s\x00", len(tenant), tenant)
	var body map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&body); err != nil {
		h.Write(raw) // not an object; the proxy rejects these before the walk
	} else {
		for k := range fieldsNotInKey {
			delete(body, k)
		}
		referenceNormalizeNumbers(body)
		b, _ := json.Marshal(body) // maps marshal with sorted keys
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// referenceNormalizeNumbers rewrites json.Number values so 1, 1.0 and 1e0 are the same key.
func referenceNormalizeNumbers(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = referenceNormalizeNumbers(x)
		}
	case []any:
		for i, x := range t {
			t[i] = referenceNormalizeNumbers(x)
		}
	case json.Number:
		if i, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return json.Number(strconv.FormatInt(i, 10))
		}
		if f, err := strconv.ParseFloat(string(t), 64); err == nil {
			if f == float64(int64(f)) && f < 1e18 && f > -1e18 {
				return json.Number(strconv.FormatInt(int64(f), 10))
			}
			return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
		}
	}
	return v
}

// referenceBody is what referenceCanonicalKey hashes after the prefix, for failure messages.
func referenceBody(raw []byte) (string, bool) {
	var body map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&body); err != nil {
		return string(raw), false
	}
	for k := range fieldsNotInKey {
		delete(body, k)
	}
	referenceNormalizeNumbers(body)
	b, _ := json.Marshal(body)
	return string(b), true
}

// canonBody is what canonicalKey hashes after the prefix.
func canonBody(raw []byte) string {
	var buf bytes.Buffer
	c := &canonicaliser{}
	c.writeKeyInput(&buf, "", raw)
	s := buf.String()
	return s[strings.IndexByte(s, 0)+3:] // "eoc-key-v1\x000:\x00"
}

func checkKeyMatchesReference(t *testing.T, tenant string, raw []byte) {
	t.Helper()
	if got, want := canonicalKey(tenant, raw), referenceCanonicalKey(tenant, raw); got != want {
		ref, ok := referenceBody(raw)
		t.Fatalf("key differs for tenant %q body %q\nreference (object %v): %q\ncanonical:              %q",
			tenant, raw, ok, ref, canonBody(raw))
	}
}

// keySeeds are chat bodies and the corners of the canonical form.
var keySeeds = []string{
	`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"say hello"}],"max_tokens":16}`,
	`{ "messages" : [ {"content":"be brief","role":"system"} , {"role":"user","content":"say hello"} ] ,
	  "max_tokens" : 16 , "model" : "m" }`,
	`{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"what is in this image?"},{"type":"image_url","image_url":{"url":"https://x/y.png","detail":"low"}}]}],"temperature":0.7,"top_p":1.0,"seed":42,"stream":true,"stream_options":{"include_usage":true},"user":"u-1","metadata":{"a":"b"},"store":false}`,
	`{"model":"m","messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]}}}],"tool_choice":"auto"}`,
	`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"{\"ok\":true}"}]}`,
	`{"\u006dodel":"m","m\u0065ssages":[{"r\u006fle":"user","content":"caf\u00e9 \u4e16\u754c \ud83d\ude00 \u2028\u2029 <b>&amp;</b> \/ \b\f\n\r\t \u0000\u001f\u007f"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"café 世界 😀 ` + "\u2028\u2029\x7f" + ` <script>&"}]}`,
	`{"a":"\ud800","b":"\udc00","c":"\ud800\u0041","d":"\ud83d\ude00\ud83d","e":"\ud800\\u0041","f":"\uDBFF\uDFFF"}`,
	"{\"bad\":\"\xff\xfe \xc3 \xe2\x82 ok\",\"\xff\":1,\"\xfe\":2}",
	`{"n":[0,-0,1,-1,1.0,1e0,1E0,1e+0,10e-1,0.1,1.5,-1.5e-3,1e18,-1e18,999999999999999999,9223372036854775807,9223372036854775808,-9223372036854775808,-9223372036854775809,12345678901234567890,1e308,1e309,-1e400,1e-400,-1e-400,4.9e-324,0.30000000000000004,123456789012345678.0,1.7976931348623157e308]}`,
	`{"temperature":1.0,"top_p":1,"frequency_penalty":0.0,"presence_penalty":-0.0,"n":1e0,"logit_bias":{"50256":-100,"1234":5.5}}`,
	`{"a":{"z":1,"y":{"c":[{"b":2,"a":1},{"a":1,"b":2}],"a":null},"x":true},"A":false,"_":[],"":{}}`,
	`{"a":1,"a":2,"b":{"k":1,"k":{"z":1}},"stream":true,"stream":false,"st\u0072eam":1,"c":[{"d":1,"d":2}]}`,
	`{"model":"m","nested":{"stream":true,"user":"kept","metadata":{"x":1},"store":true}}`,
	" \t\r\n{\"model\" :\"m\"}\n",
	`{"model":"m"} trailing garbage`,
	`{"model":"m"}}`,
	`null`,
	`null garbage`,
	`nullx`,
	`{}`,
	`[]`,
	`[{"model":"m"}]`,
	`"model"`,
	`42`,
	`true`,
	``,
	`   `,
	`{"model":"m",}`,
	`{"model":"m"`,
	`{"model":"m" "x":1}`,
	`{"model":01}`,
	`{"model":1.}`,
	`{"model":.5}`,
	`{"model":-}`,
	`{"model":1e}`,
	`{"model":"\x"}`,
	`{"model":"\u12"}`,
	"{\"model\":\"a\tb\"}",
	`{"model":tru}`,
	`{"model":nulll}`,
	"\ufeff{\"model\":\"m\"}",
	`{"emoji key 😀":1,"é":2,"e":3,"z":4,"\u00e9":5}`,
	`{"deep":[[[[[[[[[[{"a":[{"b":[{"c":{}}]}]}]]]]]]]]]]}`,
}

func TestNotInKeyMatchesFieldsNotInKey(t *testing.T) {
	for k := range fieldsNotInKey {
		if !notInKey([]byte(k)) {
			t.Errorf("notInKey(%q) is false", k)
		}
	}
	for _, k := range []string{"model", "messages", "Stream", "stream ", "streams", "", "users", "meta"} {
		if notInKey([]byte(k)) != fieldsNotInKey[k] {
			t.Errorf("notInKey(%q) disagrees with fieldsNotInKey", k)
		}
	}
}

func TestKeyMatchesReferenceCases(t *testing.T) {
	for _, s := range keySeeds {
		checkKeyMatchesReference(t, "", []byte(s))
		checkKeyMatchesReference(t, "team-é\x00b", []byte(s))
	}
}

// Every prefix of a valid body is a malformed one (or, for `null`, a short one).
func TestKeyMatchesReferencePrefixes(t *testing.T) {
	for _, s := range keySeeds {
		for i := range len(s) {
			checkKeyMatchesReference(t, "t", []byte(s[:i]))
		}
	}
}

func TestKeyMatchesReferenceDepth(t *testing.T) {
	for _, depth := range []int{9999, 10000, 10001} {
		arrays := `{"a":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`
		objects := strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth)
		checkKeyMatchesReference(t, "", []byte(arrays))
		checkKeyMatchesReference(t, "", []byte(objects))
	}
}

func TestKeyMatchesReferenceGenerated(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range n {
		var g jsonGen
		g.r = r
		g.top()
		checkKeyMatchesReference(t, "", g.b)
	}
}

// jsonGen writes random JSON that stresses the canonical form: shuffled and duplicate keys,
// escapes of every kind, invalid UTF-8, number spellings, whitespace, and now and then a
// malformed body.
type jsonGen struct {
	r *rand.Rand
	b []byte
}

var genKeys = []string{"model", "messages", "role", "content", "stream", "user", "store", "metadata",
	"stream_options", "a", "b", "A", "", "é", "e\u0301", "世界", "😀", "<&>", "k\u2028", "\x7f", "\xff"}

var genRunes = []rune{'a', 'Z', '0', ' ', '<', '>', '&', '"', '\\', '/', '\b', '\f', '\n', '\r', '\t',
	0, 0x1f, 0x7f, 'é', '世', '😀', '\u2028', '\u2029', '\ufffd', 0xd800, 0xdc00, -1}

var genNumbers = []string{"0", "-0", "1", "-1", "16", "1.0", "1e0", "1E+2", "10e-1", "0.5", "-1.5e-3",
	"0.7", "1e18", "-1e18", "999999999999999999", "-999999999999999999", "1000000000000000000",
	"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
	"12345678901234567890", "1e308", "1e309", "-1e400", "1e-400", "-1e-400", "4.9e-324", "2.5e-324",
	"0.30000000000000004", "123456789012345678.0", "1.7976931348623157e308", "100000000000000000000000"}

func (g *jsonGen) pick(n int) int { return g.r.IntN(n) }

func (g *jsonGen) space() {
	switch g.pick(8) {
	case 0:
		g.b = append(g.b, ' ')
	case 1:
		g.b = append(g.b, "\n\t "...)
	case 2:
		g.b = append(g.b, "\r\n"...)
	}
}

func (g *jsonGen) top() {
	g.space()
	switch g.pick(40) {
	case 0:
		g.b = append(g.b, "null"...)
	case 1:
		g.value(2)
	default:
		g.object(0, true)
	}
	g.space()
	switch g.pick(30) {
	case 0: // malformed: cut short
		if len(g.b) > 1 {
			g.b = g.b[:g.pick(len(g.b))]
		}
	case 1: // trailing data after the value
		g.b = append(g.b, `{"x":1}`...)
	case 2: // a malformed byte somewhere
		if len(g.b) > 0 {
			const junk = ",:{}[]\"\\ x\x00"
			g.b[g.pick(len(g.b))] = junk[g.pick(len(junk))]
		}
	}
}

func (g *jsonGen) value(depth int) {
	k := g.pick(10)
	if depth > 5 && k < 4 {
		k += 4
	}
	switch k {
	case 0, 1:
		g.object(depth+1, false)
	case 2, 3:
		g.b = append(g.b, '[')
		n := g.pick(5)
		for i := range n {
			if i > 0 {
				g.b = append(g.b, ',')
			}
			g.space()
			g.value(depth + 1)
			g.space()
		}
		g.b = append(g.b, ']')
	case 4, 5:
		g.str(g.randomString())
	case 6, 7:
		g.b = append(g.b, genNumbers[g.pick(len(genNumbers))]...)
	default:
		g.b = append(g.b, [...]string{"true", "false", "null"}[g.pick(3)]...)
	}
}

func (g *jsonGen) object(depth int, top bool) {
	g.b = append(g.b, '{')
	n := g.pick(7)
	if top {
		n += 2
	}
	for i := range n {
		if i > 0 {
			g.b = append(g.b, ',')
		}
		g.space()
		if g.pick(4) == 0 {
			g.str(g.randomString())
		} else {
			g.str(genKeys[g.pick(len(genKeys))])
		}
		g.space()
		g.b = append(g.b, ':')
		g.space()
		g.value(depth)
		g.space()
	}
	g.b = append(g.b, '}')
}

func (g *jsonGen) randomString() string {
	var sb strings.Builder
	for range g.pick(8) {
		switch r := genRunes[g.pick(len(genRunes))]; {
		case r < 0:
			sb.WriteByte(0xc3) // a truncated sequence
		case r >= 0xd800 && r < 0xe000:
			fmt.Fprintf(&sb, "\\u%04x", r) // marked as an escape below
			sb.WriteByte(0)
		default:
			sb.WriteRune(r)
		}
	}
	return sb.String()
}

// str writes s as a JSON string, escaping each character at random where JSON allows it (and
// always where it must). A "\\uXXXX\x00" sequence from randomString is a lone surrogate escape.
func (g *jsonGen) str(s string) {
	g.b = append(g.b, '"')
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], `\u`) && i+6 < len(s) && s[i+6] == 0 {
			g.b = append(g.b, s[i:i+6]...)
			i += 7
			continue
		}
		c := s[i]
		r, size := rune(c), 1
		if c >= 0x80 {
			r = []rune(s[i : i+min(4, len(s)-i)])[0]
			if r == 0xfffd && !strings.HasPrefix(s[i:], "\ufffd") {
				g.b = append(g.b, c) // invalid UTF-8 passes through raw
				i++
				continue
			}
			size = len(string(r))
		}
		i += size
		escape := g.pick(3) == 0 || r < 0x20 || r == '"' || r == '\\'
		if !escape {
			g.b = append(g.b, string(r)...)
			continue
		}
		if short := map[rune]string{'"': `\"`, '\\': `\\`, '/': `\/`, '\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`}[r]; short != "" && g.pick(2) == 0 {
			g.b = append(g.b, short...)
			continue
		}
		format := "\\u%04x"
		if g.pick(2) == 0 {
			format = "\\u%04X"
		}
		if r > 0xffff {
			hi, lo := 0xd800+(r-0x10000)>>10, 0xdc00+(r-0x10000)&0x3ff
			g.b = fmt.Appendf(g.b, format+format, hi, lo)
		} else {
			g.b = fmt.Appendf(g.b, format, r)
		}
	}
	g.b = append(g.b, '"')
}

func FuzzKeyMatchesReference(f *testing.F) {
	for i, s := range keySeeds {
		f.Add([]string{"", "team-a", "é"}[i%3], []byte(s))
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 64 {
		g := jsonGen{r: r}
		g.top()
		f.Add("", g.b)
	}
	f.Fuzz(func(t *testing.T, tenant string, body []byte) {
		checkKeyMatchesReference(t, tenant, body)
	})
}

const benchKeyBody = `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"say hello"}],"max_tokens":16}`

// benchKeyBodies are the brief chat body and longer ones, to show the cost grows linearly.
func benchKeyBodies() []struct {
	name string
	body []byte
} {
	turn := `{"role":"user","content":"Summarise the following paragraph in one sentence, keeping the names: ` +
		`Ada Lovelace wrote the first program for Babbage's engine — café, naïve, 世界.\n"},` +
		`{"role":"assistant","content":"Ada Lovelace wrote the first program for the Analytical Engine."},`
	long := func(n int) []byte {
		return []byte(`{"model":"m","temperature":0.7,"messages":[` + strings.Repeat(turn, n) +
			`{"role":"user","content":"thanks"}],"max_tokens":256,"stream":true}`)
	}
	return []struct {
		name string
		body []byte
	}{
		{"small", []byte(benchKeyBody)},
		{"4KiB", long(16)},
		{"64KiB", long(256)},
	}
}

func BenchmarkKey(b *testing.B) {
	for _, bb := range benchKeyBodies() {
		for _, impl := range []struct {
			name string
			key  func(string, []byte) string
		}{
			{"canonical", canonicalKey},
			{"reference", func(t string, raw []byte) string { return referenceCanonicalKey(t, raw) }},
		} {
			b.Run(bb.name+"/"+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(bb.body)))
				for b.Loop() {
					impl.key("team-a", bb.body)
				}
			})
		}
	}
}

func TestKeyAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	for _, bb := range benchKeyBodies() {
		if n := testing.AllocsPerRun(100, func() { canonicalKey("team-a", bb.body) }); n > 1 {
			t.Errorf("%s: %v allocs per key, want 1 (the string)", bb.name, n)
		}
	}
}
