package main

import (
	"io"
	"sync"
	"time"
)

// lineWriter batches log lines, so that a request neither waits for the write(2) of its
// access-log line nor wakes a goroutine for it: a line is an append under a lock. The batch is
// written by the Write that brings it to flushBytes (the access log's Write comes after the
// response is flushed), unless another write is under way, or else by a timer armed once a
// batch, at most flushDelay after its first line, for a quiet log. A timer that fires runs its
// function on a goroutine of its own, a thread woken on a busy server: with the batches written
// by size, it fires at most once per flushDelay. Lines keep their order. Past maxPending bytes
// waiting, Write waits for the write (the log cannot outgrow memory); after Close, every Write
// writes. What a crash leaves unwritten is at most the last flushDelay's lines, or flushBytes of
// them: the process's ordinary exits all pass Close.
type lineWriter struct {
	w     io.Writer
	timer *time.Timer

	writing sync.Mutex // held by whoever takes the pending lines, until they are written
	mu      sync.Mutex // guards pending, armed and closed
	pending []byte
	spare   []byte
	armed   bool // the timer will flush
	closed  bool
}

const (
	flushBytes = 32 << 10
	maxPending = 1 << 20
	flushDelay = 100 * time.Millisecond
)

func newLineWriter(w io.Writer) *lineWriter {
	lw := &lineWriter{w: w}
	lw.timer = time.AfterFunc(time.Hour, func() {
		lw.mu.Lock()
		lw.armed = false // lines from now on arm the timer again
		lw.mu.Unlock()
		_ = lw.flush() // a log that cannot be written has nowhere to say so
	})
	lw.timer.Stop()
	return lw
}

// Write queues a copy of p, or writes it now when the writer is closed or too far behind.
func (lw *lineWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	inline := lw.closed || len(lw.pending)+len(p) > maxPending
	lw.pending = append(lw.pending, p...)
	full := !inline && len(lw.pending) >= flushBytes
	arm := !inline && !lw.armed // the batch's first line: the timer is the backstop
	lw.armed = lw.armed || arm
	lw.mu.Unlock()
	if inline {
		return len(p), lw.flush()
	}
	if full && lw.writing.TryLock() { // else a write is under way: the next Write or the timer takes these
		return len(p), lw.flushLocked()
	}
	if arm {
		lw.timer.Reset(flushDelay)
	}
	return len(p), nil
}

// flush writes the pending lines, after any batch already being written.
func (lw *lineWriter) flush() error {
	lw.writing.Lock()
	return lw.flushLocked()
}

// flushLocked is flush with writing held; it releases it.
func (lw *lineWriter) flushLocked() error {
	defer lw.writing.Unlock()
	lw.mu.Lock()
	b := lw.pending
	if len(b) == 0 {
		lw.mu.Unlock()
		return nil
	}
	lw.pending, lw.spare = lw.spare[:0], nil // the two buffers take turns
	lw.mu.Unlock()
	_, err := lw.w.Write(b)
	if cap(b) <= maxPending {
		lw.spare = b[:0] // spare is only taken under writing, which is held
	}
	return err
}

// Close writes what is pending and makes later Writes write at once. It is safe to call twice.
func (lw *lineWriter) Close() error {
	lw.mu.Lock()
	lw.closed = true
	lw.mu.Unlock()
	lw.timer.Stop() // a flush the timer already started is waited for by flush's lock
	return lw.flush()
}
