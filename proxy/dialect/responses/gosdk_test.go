package responses

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	oairesponses "github.com/openai/openai-go/v3/responses"
)

// TestGoSDKReads: the official Go SDK (openai-go, as e2e pins it) decodes the golden Response
// objects and stream events into its types, with the fields a caller reads.
func TestGoSDKReads(t *testing.T) {
	for _, tc := range []struct{ file, text, status string }{
		{"whole_text.json", "Hello there.", "completed"},
		{"whole_tool.json", "", "completed"},
		{"whole_length.json", "1 2 3", "incomplete"},
	} {
		b, err := os.ReadFile(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		var r oairesponses.Response
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if r.OutputText() != tc.text || string(r.Status) != tc.status || r.Usage.TotalTokens != 10 || !strings.HasPrefix(r.ID, "resp_") {
			t.Errorf("%s: text %q status %q usage %+v", tc.file, r.OutputText(), r.Status, r.Usage)
		}
	}
	for _, file := range []string{"stream_text.sse", "stream_tool.sse", "stream_reasoning.sse"} {
		b, err := os.ReadFile(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		var text, args string
		var final oairesponses.Response
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev oairesponses.ResponseStreamEventUnion
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatalf("%s: %v in %s", file, err, data)
			}
			switch e := ev.AsAny().(type) {
			case oairesponses.ResponseTextDeltaEvent:
				text += e.Delta
			case oairesponses.ResponseFunctionCallArgumentsDeltaEvent:
				args += e.Delta
			case oairesponses.ResponseCompletedEvent:
				final = e.Response
			}
		}
		if final.ID == "" || final.OutputText() != text || final.Usage.OutputTokens != 3 {
			t.Errorf("%s: completed %+v, deltas %q", file, final.Status, text)
		}
		if file == "stream_tool.sse" && (len(final.Output) != 2 || final.Output[0].AsFunctionCall().Arguments+final.Output[1].AsFunctionCall().Arguments != `{"city":"Paris"}{"city":"Oslo"}` || args == "") {
			t.Errorf("%s: tool calls %+v", file, final.Output)
		}
	}
}
