package proxy

import (
	"bytes"
	"net/http"
	"strconv"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

// sseWriter is the walk's sink for a stream: each chunk goes through the dialect's encoder, and
// the events it makes of that chunk go out as server-sent events in one write and one flush (a
// dialect that opens with several events costs one flush, not several). Headers go out with the
// first event, so an error before it can still become a status.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	enc     dialect.Encoder
	emit    dialect.Emit // sw.event, bound once
	stage   string       // the stage that writes, from the walk
	idle    time.Duration
	onStart func() // called once, when the first byte goes out
	backend string // the backend that writes, from the neural stage
	tries   int    // its attempt number
	started bool
	first   time.Time // when the first chunk went out: the call's first token
	buf     bytes.Buffer
}

func newSSEWriter(w http.ResponseWriter, enc dialect.Encoder, idle time.Duration, onStart func()) *sseWriter {
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), enc: enc, idle: idle, onStart: onStart}
	sw.emit = sw.event
	return sw
}

func (sw *sseWriter) start() {
	if sw.started {
		return
	}
	sw.started = true
	if sw.onStart != nil {
		sw.onStart()
	}
	h := sw.w.Header()
	if sw.backend != "" {
		h.Set(HeaderBackend, sw.backend)
		h.Set(HeaderAttempts, strconv.Itoa(sw.tries))
	}
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Set(HeaderStage, sw.stage)
	h.Set("Trailer", trailerNames)
	sw.w.WriteHeader(http.StatusOK)
}

var (
	_ cascade.StageSink   = (*sseWriter)(nil)
	_ cascade.BackendSink = (*sseWriter)(nil)
)

// Backend is told by the neural stage which backend it is about to try.
func (sw *sseWriter) Backend(name string, attempts int) {
	if !sw.started {
		sw.backend, sw.tries = name, attempts
	}
}

// Stage is told by the walk which stage is about to write.
func (sw *sseWriter) Stage(name string) { sw.stage = name }

// Chunk writes the events the dialect makes of one chunk.
func (sw *sseWriter) Chunk(ch *cascade.Chunk) error {
	sw.buf.Reset()
	err := sw.enc.Chunk(ch, sw.emit)
	if err == nil {
		err = sw.flushEvents()
	}
	if sw.first.IsZero() && sw.started && err == nil {
		sw.first = time.Now()
	}
	return err
}

// flushEvents writes and flushes the events buffered since the last flush, if any.
func (sw *sseWriter) flushEvents() error {
	if sw.buf.Len() == 0 {
		return nil
	}
	return sw.write(sw.buf.Bytes())
}

// event buffers e for the next flush: "event: Name" when it has one, then its data, each line
// of it a "data:" line, then the blank line that ends an event.
func (sw *sseWriter) event(e dialect.Event) error {
	sw.start()
	if e.Name != "" {
		sw.buf.WriteString("event: ")
		sw.buf.WriteString(e.Name)
		sw.buf.WriteByte('\n')
	}
	data := e.Data
	for {
		line, rest, more := bytes.Cut(data, []byte{'\n'})
		sw.buf.WriteString("data: ")
		sw.buf.Write(line)
		sw.buf.WriteByte('\n')
		if !more {
			break
		}
		data = rest
	}
	sw.buf.WriteByte('\n')
	return nil
}

func (sw *sseWriter) write(b []byte) error {
	_ = sw.rc.SetWriteDeadline(time.Now().Add(sw.idle))
	if _, err := sw.w.Write(b); err != nil {
		return err
	}
	return sw.rc.Flush()
}

// finishStream ends a stream that has begun: the dialect's closing events with the call's
// figures, then the trailers; or, if the walk failed after bytes went out, a cut connection so
// the client sees a terminated stream.
func (s *Server) finishStream(w http.ResponseWriter, sw *sseWriter, ans *cascade.Answer, c *Call, err error) error {
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	sw.buf.Reset()
	if err := sw.enc.End(ans, figures(c), sw.emit); err != nil {
		return err
	}
	if err := sw.flushEvents(); err != nil {
		return err
	}
	setEnergyHeaders(w.Header(), c)
	return nil
}
