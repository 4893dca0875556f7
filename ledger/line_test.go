package ledger

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// Each line of the file is json.Marshal of the record Append returned, then a newline; a long
// record after a short one leaves nothing of either behind.
func TestAppendWritesMarshalledLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.jsonl")
	l := open(t, Options{Path: path, Fsync: FsyncEvery})
	long := rec(2)
	long.Reason = string(bytes.Repeat([]byte("<&>é"), 300))
	var want []byte
	for _, r := range []Record{rec(1), long, rec(3)} {
		got, err := l.Append(r)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(&got)
		if err != nil {
			t.Fatal(err)
		}
		want = append(append(want, b...), '\n')
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, want) {
		t.Errorf("file holds\n%s\nwant\n%s", data, want)
	}
}
