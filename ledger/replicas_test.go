package ledger

import (
	"path/filepath"
	"reflect"
	"testing"
)

func TestReplicaPathAndChains(t *testing.T) {
	if got := ReplicaPath("/var/eoc/receipts.jsonl", "eu-1"); got != "/var/eoc/receipts-eu-1.jsonl" {
		t.Fatal(got)
	}
	if got := ReplicaPath("/var/eoc/receipts.jsonl", ""); got != "/var/eoc/receipts.jsonl" {
		t.Fatal(got)
	}
	chains, aside := Chains([]string{"r-b.jsonl", "r-a.jsonl.20261203T100000Z.7", "r-a.jsonl", "r-b.jsonl.torn"})
	want := [][]string{{"r-a.jsonl.20261203T100000Z.7", "r-a.jsonl"}, {"r-b.jsonl"}}
	if !reflect.DeepEqual(chains, want) || len(aside) != 1 {
		t.Fatalf("%v %v", chains, aside)
	}
}

func TestReplicaInTheChain(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "l.jsonl")
	l, err := Open(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(Record{RequestID: "1", Replica: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(Record{RequestID: "2"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(path); err != nil {
		t.Fatal(err)
	}
	// The replica is covered by the hash: a record moved to another replica's name breaks.
	r := Record{Seq: 1, RequestID: "1", Replica: "a", Prev: ZeroHash}
	s := newSealer(nil)
	h := s.seal(&r)
	r.Replica = "b"
	if s.seal(&r) == h {
		t.Fatal("the replica is not in the hash")
	}
}
