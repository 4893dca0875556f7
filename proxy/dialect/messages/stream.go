package messages

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

// encoder turns chat chunks into Anthropic's stream: message_start with the first chunk, one
// content block per text run and per tool call (content_block_start, its deltas,
// content_block_stop), and, at the end, message_delta (stop reason, usage), eoc (the energy
// figures) and message_stop. It serves one stream; it is not safe for concurrent use.
type encoder struct {
	model        string
	promptTokens int

	started  bool
	id       string
	next     int // the index of the next block
	open     int // the open block's index, -1 when none
	openTool bool
	// tools maps a chat tool call's index onto its block's.
	tools     map[int]int
	anonTools int // tool calls without an index, numbered downwards from -1
	finish    string
	usage     *cascade.Usage
	outLen    int // runes streamed, for an estimate of output_tokens when no usage came
}

var _ dialect.Encoder = (*encoder)(nil)

// Chunk emits the events of one chat chunk; only the first choice is read (n is always 1).
func (en *encoder) Chunk(ch *cascade.Chunk, emit dialect.Emit) error {
	if err := en.start(ch.ID, ch.Model, emit); err != nil {
		return err
	}
	if ch.Usage != nil {
		u := *ch.Usage
		en.usage = &u
	}
	for i := range ch.Choices {
		c := &ch.Choices[i]
		if c.Index != 0 {
			continue
		}
		d := &c.Delta
		text := d.Refusal
		if d.Content != nil {
			text = *d.Content + text
		}
		if text != "" {
			if err := en.text(text, emit); err != nil {
				return err
			}
		}
		for j := range d.ToolCalls {
			if err := en.toolCall(&d.ToolCalls[j], emit); err != nil {
				return err
			}
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			en.finish = *c.FinishReason
		}
	}
	return nil
}

func (en *encoder) start(id, model string, emit dialect.Emit) error {
	if en.started {
		return nil
	}
	en.started = true
	en.id = messageID(id)
	en.model = modelOf(model, en.model)
	return send(emit, "message_start", struct {
		Type    string        `json:"type"`
		Message messageObject `json:"message"`
	}{"message_start", messageObject{ID: en.id, Type: "message", Role: "assistant", Model: en.model, Content: []contentBlock{},
		Usage: usage{InputTokens: en.promptTokens}}})
}

func (en *encoder) text(s string, emit dialect.Emit) error {
	if en.open < 0 || en.openTool {
		empty := ""
		if err := en.begin(contentBlock{Type: "text", Text: &empty}, false, emit); err != nil {
			return err
		}
	}
	en.outLen += utf8.RuneCountInString(s)
	return send(emit, "content_block_delta", blockDelta{Type: "content_block_delta", Index: en.open,
		Delta: delta{Type: "text_delta", Text: &s}})
}

func (en *encoder) toolCall(tc *cascade.ToolCall, emit dialect.Emit) error {
	key := 0
	if tc.Index != nil {
		key = *tc.Index
	} else {
		en.anonTools--
		key = en.anonTools
	}
	idx, seen := en.tools[key]
	if !seen {
		if err := en.begin(contentBlock{Type: "tool_use", ID: toolID(tc.ID), Name: tc.Function.Name, Input: json.RawMessage("{}")}, true, emit); err != nil {
			return err
		}
		idx = en.open
		en.tools[key] = idx
	}
	if tc.Function.Arguments == "" {
		return nil
	}
	args := tc.Function.Arguments
	en.outLen += utf8.RuneCountInString(args)
	return send(emit, "content_block_delta", blockDelta{Type: "content_block_delta", Index: idx,
		Delta: delta{Type: "input_json_delta", PartialJSON: &args}})
}

// begin closes the open block and opens b.
func (en *encoder) begin(b contentBlock, tool bool, emit dialect.Emit) error {
	if err := en.stop(emit); err != nil {
		return err
	}
	en.open, en.openTool = en.next, tool
	en.next++
	return send(emit, "content_block_start", struct {
		Type         string       `json:"type"`
		Index        int          `json:"index"`
		ContentBlock contentBlock `json:"content_block"`
	}{"content_block_start", en.open, b})
}

// stop closes the open block, if any.
func (en *encoder) stop(emit dialect.Emit) error {
	if en.open < 0 {
		return nil
	}
	i := en.open
	en.open = -1
	return send(emit, "content_block_stop", struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}{"content_block_stop", i})
}

// End closes the open block and emits message_delta, the eoc event and message_stop. The stop
// reason is the chunks' finish reason, else the answer's; the usage is the answer's, else the
// usage chunk's, else an estimate.
func (en *encoder) End(ans *cascade.Answer, fig dialect.Figures, emit dialect.Emit) error {
	if ans != nil && !en.started {
		if err := en.replay(ans, emit); err != nil {
			return err
		}
	}
	if ans != nil {
		if en.finish == "" && len(ans.Choices) > 0 {
			en.finish = ans.Choices[0].FinishReason
		}
		if ans.Usage != nil {
			en.usage = ans.Usage
		}
	} else if err := en.start("", "", emit); err != nil {
		return err
	}
	if err := en.stop(emit); err != nil {
		return err
	}
	u := usage{InputTokens: en.promptTokens, OutputTokens: (en.outLen + 3) / 4}
	if en.usage != nil {
		u = usage{InputTokens: en.usage.PromptTokens, OutputTokens: en.usage.CompletionTokens}
	}
	reason := stopReason(en.finish)
	if err := send(emit, "message_delta", messageDelta{Type: "message_delta",
		Delta: stopDelta{StopReason: reason}, Usage: u}); err != nil {
		return err
	}
	if err := send(emit, "eoc", struct {
		Type string          `json:"type"`
		EOC  dialect.Figures `json:"eoc"`
	}{"eoc", fig}); err != nil {
		return err
	}
	return send(emit, "message_stop", struct {
		Type string `json:"type"`
	}{"message_stop"})
}

// replay emits a whole answer's content when no chunk of it came.
func (en *encoder) replay(ans *cascade.Answer, emit dialect.Emit) error {
	if err := en.start(ans.ID, ans.Model, emit); err != nil {
		return err
	}
	if len(ans.Choices) == 0 {
		return nil
	}
	m := &ans.Choices[0].Message
	text := m.Refusal
	if m.Content != nil {
		text = *m.Content + text
	}
	if text != "" {
		if err := en.text(text, emit); err != nil {
			return err
		}
	}
	for i := range m.ToolCalls {
		tc := m.ToolCalls[i]
		tc.Index = &i
		if err := en.toolCall(&tc, emit); err != nil {
			return err
		}
	}
	return nil
}

type blockDelta struct {
	Type  string `json:"type"`
	Index int    `json:"index"`
	Delta delta  `json:"delta"`
}

type delta struct {
	Type        string  `json:"type"`
	Text        *string `json:"text,omitempty"`
	PartialJSON *string `json:"partial_json,omitempty"`
}

type messageDelta struct {
	Type  string    `json:"type"`
	Delta stopDelta `json:"delta"`
	Usage usage     `json:"usage"`
}

type stopDelta struct {
	StopReason   string  `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
}

func send(emit dialect.Emit, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return emit(dialect.Event{Name: name, Data: b})
}
