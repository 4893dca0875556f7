package responses

import (
	"encoding/json"
	"strings"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

// encoder renders a chat stream as the Responses API's typed events: response.created and
// response.in_progress first; per output item its .added, its deltas and its .done events; and
// response.completed (or response.incomplete) last, with the whole Response, usage and the
// call's energy figures (field eoc). Items open as their first delta arrives and close, in
// order, at the end.
type encoder struct {
	x       *exchange
	seq     int
	started bool
	model   string
	items   []*streamItem // in output order
	msg     *streamItem   // the message item, once open
	reason  *streamItem   // the reasoning item, once open
	calls   map[int]*streamItem
	finish  string
	usage   *cascade.Usage
}

// streamItem is one output item being streamed.
type streamItem struct {
	index  int
	msg    *messageItem      // a message
	reason *reasoningItem    // or the model's reasoning
	text   strings.Builder   // its text so far (a message's or the reasoning's)
	call   *functionCallItem // or a tool call
	args   strings.Builder   // its arguments so far
	callNo int               // the tool call's index in the chat stream
}

var _ dialect.Encoder = (*encoder)(nil)

// event is the fields every event has; the rest are the event's own.
type event struct {
	Type     string `json:"type"`
	Sequence int    `json:"sequence_number"`
}

type responseEvent struct {
	event
	Response *response `json:"response"`
}

type itemEvent struct {
	event
	OutputIndex int `json:"output_index"`
	Item        any `json:"item"`
}

type partEvent struct {
	event
	ItemID       string `json:"item_id"`
	OutputIndex  int    `json:"output_index"`
	ContentIndex int    `json:"content_index"`
	Part         any    `json:"part"`
}

type textDeltaEvent struct {
	event
	ItemID       string `json:"item_id"`
	OutputIndex  int    `json:"output_index"`
	ContentIndex int    `json:"content_index"`
	Delta        string `json:"delta"`
	Logprobs     []any  `json:"logprobs"`
}

type textDoneEvent struct {
	event
	ItemID       string `json:"item_id"`
	OutputIndex  int    `json:"output_index"`
	ContentIndex int    `json:"content_index"`
	Text         string `json:"text"`
	Logprobs     []any  `json:"logprobs"`
}

type reasoningDeltaEvent struct {
	event
	ItemID       string `json:"item_id"`
	OutputIndex  int    `json:"output_index"`
	ContentIndex int    `json:"content_index"`
	Delta        string `json:"delta"`
}

type reasoningDoneEvent struct {
	event
	ItemID       string `json:"item_id"`
	OutputIndex  int    `json:"output_index"`
	ContentIndex int    `json:"content_index"`
	Text         string `json:"text"`
}

type argsDeltaEvent struct {
	event
	ItemID      string `json:"item_id"`
	OutputIndex int    `json:"output_index"`
	Delta       string `json:"delta"`
}

type argsDoneEvent struct {
	event
	ItemID      string `json:"item_id"`
	OutputIndex int    `json:"output_index"`
	Name        string `json:"name"`
	Arguments   string `json:"arguments"`
}

// send emits one event; v's embedded event gets the type and the next sequence number.
func (e *encoder) send(emit dialect.Emit, typ string, v any, head *event) error {
	head.Type, head.Sequence = typ, e.seq
	e.seq++
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return emit(dialect.Event{Name: typ, Data: b})
}

// start emits response.created and response.in_progress, once.
func (e *encoder) start(emit dialect.Emit, model string) error {
	if e.started {
		return nil
	}
	e.started = true
	if model == "" {
		model = e.x.chat.Model
	}
	e.model = model
	r := e.x.skeleton(model)
	for _, typ := range []string{"response.created", "response.in_progress"} {
		ev := responseEvent{Response: r}
		if err := e.send(emit, typ, &ev, &ev.event); err != nil {
			return err
		}
	}
	return nil
}

// Chunk emits the events of one chat chunk.
func (e *encoder) Chunk(ch *cascade.Chunk, emit dialect.Emit) error {
	if err := e.start(emit, ch.Model); err != nil {
		return err
	}
	if ch.Usage != nil {
		e.usage = ch.Usage
	}
	for i := range ch.Choices {
		c := &ch.Choices[i]
		if c.Index != 0 {
			continue // one choice: the Responses API has no n
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			e.finish = *c.FinishReason
		}
		if d := c.Delta.ReasoningContent; d != "" {
			if err := e.reasoning(emit, d); err != nil {
				return err
			}
		}
		if d := c.Delta.Content; d != nil && *d != "" {
			if err := e.text(emit, *d); err != nil {
				return err
			}
		}
		for j := range c.Delta.ToolCalls {
			if err := e.toolCall(emit, &c.Delta.ToolCalls[j], j); err != nil {
				return err
			}
		}
	}
	return nil
}

// text emits a text delta, opening the message item first.
func (e *encoder) text(emit dialect.Emit, delta string) error {
	if e.msg == nil {
		if err := e.openMessage(emit); err != nil {
			return err
		}
	}
	e.msg.text.WriteString(delta)
	ev := textDeltaEvent{ItemID: e.msg.msg.ID, OutputIndex: e.msg.index, Delta: delta, Logprobs: []any{}}
	return e.send(emit, "response.output_text.delta", &ev, &ev.event)
}

// reasoning emits a reasoning delta, opening the reasoning item and its one reasoning_text
// part first.
func (e *encoder) reasoning(emit dialect.Emit, delta string) error {
	if e.reason == nil {
		it := &streamItem{index: len(e.items), reason: &reasoningItem{ID: e.x.reasoningID(), Type: "reasoning", Status: "in_progress",
			Summary: []any{}, Content: []any{}}}
		e.items = append(e.items, it)
		e.reason = it
		added := itemEvent{OutputIndex: it.index, Item: it.reason}
		if err := e.send(emit, "response.output_item.added", &added, &added.event); err != nil {
			return err
		}
		part := partEvent{ItemID: it.reason.ID, OutputIndex: it.index, Part: newReasoningText("")}
		if err := e.send(emit, "response.content_part.added", &part, &part.event); err != nil {
			return err
		}
	}
	e.reason.text.WriteString(delta)
	ev := reasoningDeltaEvent{ItemID: e.reason.reason.ID, OutputIndex: e.reason.index, Delta: delta}
	return e.send(emit, "response.reasoning_text.delta", &ev, &ev.event)
}

// openMessage opens the message item and its one output_text part.
func (e *encoder) openMessage(emit dialect.Emit) error {
	it := &streamItem{index: len(e.items), msg: &messageItem{ID: e.x.msgID(), Type: "message", Status: "in_progress",
		Role: "assistant", Content: []any{}}}
	e.items = append(e.items, it)
	e.msg = it
	added := itemEvent{OutputIndex: it.index, Item: it.msg}
	if err := e.send(emit, "response.output_item.added", &added, &added.event); err != nil {
		return err
	}
	part := partEvent{ItemID: it.msg.ID, OutputIndex: it.index, Part: newOutputText("")}
	return e.send(emit, "response.content_part.added", &part, &part.event)
}

// toolCall emits a tool call fragment, opening its item at its first; pos is its place in
// the chunk, for a backend that sends no index.
func (e *encoder) toolCall(emit dialect.Emit, tc *cascade.ToolCall, pos int) error {
	n := pos
	if tc.Index != nil {
		n = *tc.Index
	}
	it := e.calls[n]
	if it == nil {
		if e.calls == nil {
			e.calls = map[int]*streamItem{}
		}
		itemID, callID := e.x.callIDs(len(e.calls), tc.ID)
		it = &streamItem{index: len(e.items), callNo: n, call: &functionCallItem{ID: itemID, Type: "function_call",
			Status: "in_progress", CallID: callID, Name: tc.Function.Name, Arguments: ""}}
		e.items = append(e.items, it)
		e.calls[n] = it
		added := itemEvent{OutputIndex: it.index, Item: it.call}
		if err := e.send(emit, "response.output_item.added", &added, &added.event); err != nil {
			return err
		}
	} else if it.call.Name == "" && tc.Function.Name != "" {
		it.call.Name = tc.Function.Name
	}
	if tc.Function.Arguments == "" {
		return nil
	}
	it.args.WriteString(tc.Function.Arguments)
	ev := argsDeltaEvent{ItemID: it.call.ID, OutputIndex: it.index, Delta: tc.Function.Arguments}
	return e.send(emit, "response.function_call_arguments.delta", &ev, &ev.event)
}

// End closes the open items in output order and emits response.completed (response.incomplete
// when the answer was cut short), carrying the whole Response, its usage and fig.
func (e *encoder) End(ans *cascade.Answer, fig dialect.Figures, emit dialect.Emit) error {
	model := ""
	if ans != nil {
		model = ans.Model
	}
	if err := e.start(emit, model); err != nil {
		return err
	}
	r := e.x.skeleton(e.model)
	if e.msg == nil && len(e.calls) == 0 {
		// An answer without text or tool calls has an empty message, as a whole one has.
		if err := e.openMessage(emit); err != nil {
			return err
		}
	}
	var text strings.Builder
	for _, it := range e.items {
		if err := e.close(emit, it); err != nil {
			return err
		}
		switch {
		case it.msg != nil:
			r.Output = append(r.Output, it.msg)
			text.WriteString(it.text.String())
		case it.reason != nil:
			r.Output = append(r.Output, it.reason)
		default:
			r.Output = append(r.Output, it.call)
		}
	}
	r.OutputText = text.String()
	u := e.usage
	finish := e.finish
	if ans != nil {
		if ans.Usage != nil {
			u = ans.Usage
		}
		if finish == "" && len(ans.Choices) > 0 {
			finish = ans.Choices[0].FinishReason
		}
	}
	r.Usage = usageOf(u)
	e.x.finish(r, finish)
	e.x.save(r, nil)
	typ := "response.completed"
	if r.Status == "incomplete" {
		typ = "response.incomplete"
	}
	withFig := *r
	withFig.EOC = &fig
	ev := responseEvent{Response: &withFig}
	return e.send(emit, typ, &ev, &ev.event)
}

// close emits an item's closing events: for a message or the reasoning its text's, its part's
// and its own; for a tool call its arguments' and its own.
func (e *encoder) close(emit dialect.Emit, it *streamItem) error {
	if it.reason != nil {
		text := it.text.String()
		done := reasoningDoneEvent{ItemID: it.reason.ID, OutputIndex: it.index, Text: text}
		if err := e.send(emit, "response.reasoning_text.done", &done, &done.event); err != nil {
			return err
		}
		part := newReasoningText(text)
		pd := partEvent{ItemID: it.reason.ID, OutputIndex: it.index, Part: part}
		if err := e.send(emit, "response.content_part.done", &pd, &pd.event); err != nil {
			return err
		}
		it.reason.Status = "completed"
		it.reason.Content = []any{part}
		ev := itemEvent{OutputIndex: it.index, Item: it.reason}
		return e.send(emit, "response.output_item.done", &ev, &ev.event)
	}
	if it.msg != nil {
		text := it.text.String()
		done := textDoneEvent{ItemID: it.msg.ID, OutputIndex: it.index, Text: text, Logprobs: []any{}}
		if err := e.send(emit, "response.output_text.done", &done, &done.event); err != nil {
			return err
		}
		part := newOutputText(text)
		pd := partEvent{ItemID: it.msg.ID, OutputIndex: it.index, Part: part}
		if err := e.send(emit, "response.content_part.done", &pd, &pd.event); err != nil {
			return err
		}
		it.msg.Status = "completed"
		it.msg.Content = []any{part}
		ev := itemEvent{OutputIndex: it.index, Item: it.msg}
		return e.send(emit, "response.output_item.done", &ev, &ev.event)
	}
	args := it.args.String()
	done := argsDoneEvent{ItemID: it.call.ID, OutputIndex: it.index, Name: it.call.Name, Arguments: args}
	if err := e.send(emit, "response.function_call_arguments.done", &done, &done.event); err != nil {
		return err
	}
	it.call.Status, it.call.Arguments = "completed", args
	ev := itemEvent{OutputIndex: it.index, Item: it.call}
	return e.send(emit, "response.output_item.done", &ev, &ev.event)
}
