package cascade

import (
	"encoding/json"
	"testing"
)

// PlainString takes only strings json.Unmarshal decodes to the same text, and takes the plain ones.
func TestPlainString(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want bool
	}{
		{`""`, true}, {`"hello"`, true}, {`"héllo ☃ <b>&"`, true},
		{`"a\nb"`, false}, {`"a\"b"`, false}, {`"\u0041"`, false}, {"\"a\tb\"", false},
		{"\"\xff\"", false}, {"\"\xed\xa0\x80\"", false}, {`"a" "b"`, false}, {`"`, false}, {`x"`, false},
	} {
		s, ok := PlainString([]byte(c.raw))
		if ok != c.want {
			t.Errorf("PlainString(%q) ok = %v, want %v", c.raw, ok, c.want)
		}
		checkPlain(t, []byte(c.raw), s, ok)
	}
}

func FuzzPlainString(f *testing.F) {
	for _, s := range []string{`"hello"`, `"a\nb"`, "\"\xff\"", `"a" "b"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, ok := PlainString(raw)
		checkPlain(t, raw, s, ok)
	})
}

func checkPlain(t *testing.T, raw []byte, s string, ok bool) {
	t.Helper()
	if !ok {
		return
	}
	var want string
	if err := json.Unmarshal(raw, &want); err != nil || want != s {
		t.Errorf("PlainString(%q) = %q; json.Unmarshal gives %q, %v", raw, s, want, err)
	}
}
