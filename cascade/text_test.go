package cascade

import (
	"encoding/json"
	"testing"
)

// FuzzMessageTextAgrees checks that Message.Text reads a string content as encoding/json does,
// whatever the bytes (escapes, surrogates, invalid UTF-8, white space around the value).
func FuzzMessageTextAgrees(f *testing.F) {
	for _, s := range []string{`"hi"`, `"a\nb\"c\\"`, `"\u00e9\ud83d\ude00"`, `"\ud800"`, "\"\xff\"", ` "x" `, `"\/"`, `7`, `null`, `""`, `"\u0000"`,
		`[{"type":"text","text":"a"},{"type":"image_url"},{"type":"text","text":"b"}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		m := Message{Content: content}
		want := ""
		var s string
		var parts []ContentPart
		switch {
		case len(content) == 0 || string(content) == "null":
		case json.Unmarshal(content, &s) == nil:
			want = s
		case json.Unmarshal(content, &parts) == nil:
			return // the parts' join is TestText's business
		}
		if got := m.Text(); got != want {
			t.Fatalf("Text of %q = %q, encoding/json gives %q", content, got, want)
		}
	})
}
