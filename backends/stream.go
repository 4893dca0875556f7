package backends

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync"
)

var errLineTooLong = errors.New("stream line too long")

var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}

// lineReader reads newline-terminated lines of any length up to max. It is not safe for
// concurrent use.
type lineReader struct {
	br   *bufio.Reader
	long []byte // a line longer than br's buffer, assembled
	max  int
}

func newLineReader(r io.Reader) *lineReader {
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(r)
	return &lineReader{br: br, max: maxLine}
}

// release gives the buffer back; the reader must not be used after.
func (l *lineReader) release() {
	l.br.Reset(nil)
	readerPool.Put(l.br)
	l.br = nil
}

// next returns the next line without its "\n" or "\r\n"; the slice is valid until the next call.
// At the end of the input it returns io.EOF, or io.ErrUnexpectedEOF when the last line was cut
// off before its newline.
func (l *lineReader) next() ([]byte, error) {
	line, err := l.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		l.long = append(l.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(l.long) > l.max {
				return nil, errLineTooLong
			}
			line, err = l.br.ReadSlice('\n')
			l.long = append(l.long, line...)
		}
		line = l.long
	}
	switch {
	case err == nil:
		if len(line) > l.max+1 {
			return nil, errLineTooLong
		}
		line = line[:len(line)-1]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		return line, nil
	case err == io.EOF && len(line) > 0:
		return nil, io.ErrUnexpectedEOF
	}
	return nil, err
}

// An sseEvent is one dispatched server-sent event.
type sseEvent struct {
	// Name is the event: field ("" for the default "message").
	Name []byte
	// Data is the data: lines joined by "\n"; valid until the next call to next.
	Data []byte
	// Err marks an error event: "event: error", or llama.cpp's older "error: {...}" line.
	Err bool
}

// sseReader parses text/event-stream as the WHATWG spec says (comments, event:, multi-line
// data:), dispatching an event at each blank line. Lines end in LF or CRLF; a lone CR is not a
// line end here, as no upstream sends one. It is not safe for concurrent use.
type sseReader struct {
	lines lineReader
	data  []byte
	name  []byte
}

func newSSEReader(r io.Reader) *sseReader {
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(r)
	return &sseReader{lines: lineReader{br: br, max: maxLine}}
}

func (s *sseReader) release() { s.lines.release() }

var (
	fieldData  = []byte("data")
	fieldEvent = []byte("event")
	fieldError = []byte("error")
)

// next returns the next event. io.EOF means the input ended cleanly between events; a last event
// that was complete but not followed by a blank line is still returned first. Other errors come
// from the underlying reader (io.ErrUnexpectedEOF for a line cut short).
func (s *sseReader) next() (sseEvent, error) {
	s.data = s.data[:0]
	s.name = s.name[:0]
	hasData, isErr := false, false
	for {
		line, err := s.lines.next()
		if err != nil {
			if errors.Is(err, io.EOF) && hasData {
				return s.event(isErr), nil
			}
			return sseEvent{}, err
		}
		if len(line) == 0 {
			if hasData {
				return s.event(isErr), nil
			}
			s.name = s.name[:0]
			isErr = false
			continue
		}
		if line[0] == ':' {
			continue // comment, keep-alive
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch {
		case bytes.Equal(field, fieldData):
			if hasData {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, value...)
			hasData = true
		case bytes.Equal(field, fieldEvent):
			s.name = append(s.name[:0], value...)
		case bytes.Equal(field, fieldError):
			if hasData {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, value...)
			hasData, isErr = true, true
		}
		// id, retry and unknown fields are ignored.
	}
}

func (s *sseReader) event(isErr bool) sseEvent {
	return sseEvent{Name: s.name, Data: s.data, Err: isErr || bytes.Equal(s.name, fieldError)}
}

var doneData = []byte("[DONE]")

// isDone reports whether data is OpenAI's end-of-stream marker.
func isDone(data []byte) bool { return bytes.Equal(bytes.TrimSpace(data), doneData) }
