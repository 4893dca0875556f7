package main

import (
	"io"
	"sync"
)

// lineWriter hands log lines to a goroutine that writes them to w, so that a request does not
// wait for the write(2) of its access-log line, and lines logged while one write is under way go
// out together in the next. Lines keep their order. Past maxPending bytes waiting, Write writes
// itself (the log cannot outgrow memory); after Close, every Write does. What a crash leaves
// unwritten is the lines of the last moment: the process's ordinary exits all pass Close.
type lineWriter struct {
	w    io.Writer
	wake chan struct{}
	done chan struct{}

	writing sync.Mutex // held by whoever takes the pending lines, until they are written
	mu      sync.Mutex // guards pending and closed
	pending []byte
	spare   []byte
	closed  bool
}

const maxPending = 1 << 20

func newLineWriter(w io.Writer) *lineWriter {
	lw := &lineWriter{w: w, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go lw.run()
	return lw
}

// Write queues a copy of p, or writes it now when the writer is closed or too far behind.
func (lw *lineWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	inline := lw.closed || len(lw.pending)+len(p) > maxPending
	lw.pending = append(lw.pending, p...)
	lw.mu.Unlock()
	if inline {
		return len(p), lw.flush()
	}
	select {
	case lw.wake <- struct{}{}:
	default: // a flush is already due
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
		lw.spare = b[:0]
	}
	return err
}

func (lw *lineWriter) run() {
	defer close(lw.done)
	for range lw.wake {
		_ = lw.flush() // a log that cannot be written has nowhere to say so
	}
}

// Close writes what is pending and makes later Writes write at once. It is safe to call twice.
func (lw *lineWriter) Close() error {
	lw.mu.Lock()
	already := lw.closed
	lw.closed = true
	lw.mu.Unlock()
	if !already {
		close(lw.wake)
		<-lw.done
	}
	return lw.flush()
}
