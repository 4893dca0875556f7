package main

import (
	"io"
	"sync"
	"time"
)

// lineWriter batches log lines and writes them to w from a timer, at most flushDelay after the
// first line of a batch, so that a request neither waits for the write(2) of its access-log
// line nor wakes a goroutine for it: a line is an append under a lock, and the timer is armed
// once a batch: waking a writer goroutine per line would put a futex wake before each
// response's flush. Lines keep their order. Past maxPending bytes waiting, Write writes itself (the log cannot outgrow
// memory); after Close, every Write does. What a crash leaves unwritten is the lines of the
// last flushDelay: the process's ordinary exits all pass Close.
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
	maxPending = 1 << 20
	flushDelay = 10 * time.Millisecond
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
	arm := !inline && !lw.armed
	lw.armed = lw.armed || arm
	lw.mu.Unlock()
	if inline {
		return len(p), lw.flush()
	}
	if arm {
		lw.timer.Reset(flushDelay)
	}
	return len(p), nil
}

// flush writes the pending lines, after any batch already being written.
func (lw *lineWriter) flush() error {
	lw.writing.Lock()
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
