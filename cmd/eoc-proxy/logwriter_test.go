package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// slowBuffer is a buffer whose writes can be held, to pile lines up behind one.
type slowBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
	hold   chan struct{}
	began  chan struct{} // when set, told of each write as it begins
}

func (s *slowBuffer) Write(p []byte) (int, error) {
	if s.began != nil {
		select {
		case s.began <- struct{}{}:
		default:
		}
	}
	if s.hold != nil {
		<-s.hold
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.b.Write(p)
}

func (s *slowBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLineWriterKeepsEveryLineInOrder: lines from several goroutines all arrive, each whole,
// each goroutine's in order, and Close leaves nothing pending; Writes after Close go straight out.
func TestLineWriterKeepsEveryLineInOrder(t *testing.T) {
	out := &slowBuffer{}
	lw := newLineWriter(out)
	const writers, lines = 4, 500
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range lines {
				_, _ = fmt.Fprintf(lw, "g%d %d\n", g, i)
			}
		}()
	}
	wg.Wait()
	if err := lw.Close(); err != nil {
		t.Fatal(err)
	}
	_, _ = lw.Write([]byte("after close\n"))
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != writers*lines+1 || got[len(got)-1] != "after close" {
		t.Fatalf("%d lines, last %q", len(got), got[len(got)-1])
	}
	next := make([]int, writers)
	for _, l := range got[:len(got)-1] {
		var g, i int
		if _, err := fmt.Sscanf(l, "g%d %d", &g, &i); err != nil || i != next[g] {
			t.Fatalf("line %q out of order or torn (want g%d %d)", l, g, next[g])
		}
		next[g]++
	}
}

// TestLineWriterBatches: lines logged while a write is held go out together, in one write.
func TestLineWriterBatches(t *testing.T) {
	out := &slowBuffer{hold: make(chan struct{})}
	lw := newLineWriter(out)
	_, _ = lw.Write([]byte("first\n"))
	for i := range 100 {
		_, _ = fmt.Fprintf(lw, "queued %d\n", i)
	}
	close(out.hold)
	if err := lw.Close(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n != 101 {
		t.Fatalf("%d lines, want 101", n)
	}
	if out.writes > 3 {
		t.Fatalf("%d writes for 101 lines logged behind one write, want them batched", out.writes)
	}
}

// TestLineWriterFlushesWithoutClose: a line goes out on its own, from the timer, with no Close
// and no further line to push it.
func TestLineWriterFlushesWithoutClose(t *testing.T) {
	out := &slowBuffer{}
	lw := newLineWriter(out)
	defer func() { _ = lw.Close() }()
	for i := range 3 { // three batches: the timer is armed again after each flush
		line := fmt.Sprintf("line %d\n", i)
		_, _ = lw.Write([]byte(line))
		deadline := time.Now().Add(10 * time.Second)
		for !strings.HasSuffix(out.String(), line) {
			if time.Now().After(deadline) {
				t.Fatalf("%q not written 10 s after Write; have %q", line, out.String())
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// TestLineWriterWritesFullBatch: the Write that brings the batch to flushBytes writes it before
// it returns, without the timer; while another write is under way it does not wait for it, and
// its lines go out after it.
func TestLineWriterWritesFullBatch(t *testing.T) {
	out := &slowBuffer{}
	lw := newLineWriter(out)
	defer func() { _ = lw.Close() }()
	line := strings.Repeat("x", 1023) + "\n"
	for range flushBytes/len(line) - 1 {
		_, _ = lw.Write([]byte(line))
	}
	if out.writes != 0 {
		t.Fatalf("%d writes before the batch was full", out.writes)
	}
	_, _ = lw.Write([]byte(line))
	if out.writes != 1 || len(out.String()) != flushBytes {
		t.Fatalf("%d writes, %d bytes once the batch was full, want 1 write of %d bytes", out.writes, len(out.String()), flushBytes)
	}

	held := &slowBuffer{hold: make(chan struct{}), began: make(chan struct{}, 1)}
	lw2 := newLineWriter(held)
	full := []byte(strings.Repeat(line, flushBytes/len(line)))
	go func() { _, _ = lw2.Write(full) }() // a full batch: written by this Write, which the buffer holds
	<-held.began
	_, _ = lw2.Write(full) // a second full batch behind the held one: queued, not waited for
	close(held.hold)
	if err := lw2.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(held.String()); got != 2*len(full) {
		t.Fatalf("%d bytes written, want %d", got, 2*len(full))
	}
}
