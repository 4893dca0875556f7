package backends

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

type event struct {
	Name string
	Data string
	Err  bool
}

// readAll parses in with a reader of buffer size bufSize, feeding it through wrap.
func readAll(in []byte, bufSize int, wrap func(io.Reader) io.Reader) ([]event, error) {
	s := &sseReader{lines: lineReader{br: bufio.NewReaderSize(wrap(bytes.NewReader(in)), bufSize), max: 1 << 20}}
	var out []event
	for {
		ev, err := s.next()
		if err != nil {
			return out, err
		}
		out = append(out, event{Name: string(ev.Name), Data: string(ev.Data), Err: ev.Err})
	}
}

func TestSSEReader(t *testing.T) {
	long := strings.Repeat("x", 100_000)
	cases := []struct {
		name    string
		in      string
		want    []event
		wantErr error
	}{
		{name: "empty", in: "", wantErr: io.EOF},
		{name: "one event", in: "data: {}\n\n", want: []event{{Data: "{}"}}, wantErr: io.EOF},
		{name: "no space after colon", in: "data:{}\n\n", want: []event{{Data: "{}"}}, wantErr: io.EOF},
		{name: "only one space is stripped", in: "data:  x\n\n", want: []event{{Data: " x"}}, wantErr: io.EOF},
		{name: "CRLF", in: "data: a\r\n\r\ndata: b\r\n\r\n", want: []event{{Data: "a"}, {Data: "b"}}, wantErr: io.EOF},
		{name: "multi-line data", in: "data: a\ndata: b\n\n", want: []event{{Data: "a\nb"}}, wantErr: io.EOF},
		{name: "comments and keep-alives", in: ": ping\n\n:\n\ndata: a\n: mid\n\n", want: []event{{Data: "a"}}, wantErr: io.EOF},
		{name: "event name", in: "event: delta\ndata: a\n\ndata: b\n\n", want: []event{{Name: "delta", Data: "a"}, {Data: "b"}}, wantErr: io.EOF},
		{name: "event without data is dropped", in: "event: x\n\ndata: b\n\n", want: []event{{Data: "b"}}, wantErr: io.EOF},
		{name: "error event", in: "event: error\ndata: {\"error\":1}\n\n", want: []event{{Name: "error", Data: `{"error":1}`, Err: true}}, wantErr: io.EOF},
		{name: "llama.cpp error line", in: "error: {\"error\":1}\n\n", want: []event{{Data: `{"error":1}`, Err: true}}, wantErr: io.EOF},
		{name: "id, retry and unknown fields ignored", in: "id: 1\nretry: 10\nfoo: bar\ndata: a\n\n", want: []event{{Data: "a"}}, wantErr: io.EOF},
		{name: "field without colon", in: "data\n\n", want: []event{{Data: ""}}, wantErr: io.EOF},
		{name: "last event without blank line", in: "data: a\n\ndata: [DONE]\n", want: []event{{Data: "a"}, {Data: "[DONE]"}}, wantErr: io.EOF},
		{name: "cut mid-line", in: "data: a\n\ndata: {\"id\":", want: []event{{Data: "a"}}, wantErr: io.ErrUnexpectedEOF},
		{name: "long line", in: "data: " + long + "\n\n", want: []event{{Data: long}}, wantErr: io.EOF},
	}
	for _, tc := range cases {
		for _, size := range []int{16, 4096} {
			t.Run(tc.name+map[int]string{16: "/tiny buffer", 4096: ""}[size], func(t *testing.T) {
				got, err := readAll([]byte(tc.in), size, iotest.OneByteReader)
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("err = %v, want %v", err, tc.wantErr)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("events = %+v, want %+v", got, tc.want)
				}
			})
		}
	}
}

func TestLineTooLong(t *testing.T) {
	l := &lineReader{br: bufio.NewReaderSize(strings.NewReader(strings.Repeat("x", 1000)+"\nok\n"), 16), max: 100}
	if _, err := l.next(); !errors.Is(err, errLineTooLong) {
		t.Fatalf("err = %v, want errLineTooLong", err)
	}
	l = &lineReader{br: bufio.NewReaderSize(strings.NewReader(strings.Repeat("x", 100)+"\n"), 16), max: 100}
	if line, err := l.next(); err != nil || len(line) != 100 {
		t.Fatalf("line of exactly max: %d bytes, %v", len(line), err)
	}
}

// referenceSSE parses the whole input at once, by the same rules, as a model for the fuzzer.
func referenceSSE(in []byte) ([]event, error) {
	parts := bytes.Split(in, []byte("\n"))
	lines, rest := parts[:len(parts)-1], parts[len(parts)-1]
	var out []event
	var data []byte
	var name string
	has, isErr := false, false
	dispatch := func() {
		out = append(out, event{Name: name, Data: string(data), Err: isErr || name == "error"})
		data, name, has, isErr = nil, "", false, false
	}
	for _, line := range lines {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			if has {
				dispatch()
			}
			name, isErr = "", false
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "data", "error":
			if has {
				data = append(data, '\n')
			}
			data = append(data, value...)
			has = true
			if string(field) == "error" {
				isErr = true
			}
		case "event":
			name = string(value)
		}
	}
	if len(rest) > 0 {
		return out, io.ErrUnexpectedEOF
	}
	if has {
		dispatch()
	}
	return out, io.EOF
}

func FuzzSSE(f *testing.F) {
	for _, s := range []string{
		"data: {}\n\n",
		"data: a\r\ndata: b\r\n\r\n: c\n\nevent: error\ndata: x\n\n",
		"error: {\"error\":{}}\n\ndata: [DONE]\n",
		"data: a\n\ndata: {\"id\":",
		"event:\ndata\n\n\n\n:\r\n",
		"data: " + strings.Repeat("y", 70) + "\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		want, wantErr := referenceSSE(in)
		for _, wrap := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader, iotest.HalfReader} {
			got, err := readAll(in, 16, wrap)
			if !errors.Is(err, wantErr) {
				t.Fatalf("err = %v, want %v", err, wantErr)
			}
			if len(got) != len(want) || (len(got) > 0 && !reflect.DeepEqual(got, want)) {
				t.Fatalf("events\n%+v\nwant\n%+v", got, want)
			}
		}
	})
}
