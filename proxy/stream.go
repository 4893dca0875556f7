package proxy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// sseWriter writes chunks as server-sent events, flushing each one. Headers go out with the first
// chunk, so an error before it can still become a status.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	stage   string // the stage that writes, from the walk
	usage   bool   // the client asked for the usage chunk
	idle    time.Duration
	onStart func() // called once, when the first byte goes out
	backend string // the backend that writes, from the neural stage
	tries   int    // its attempt number
	started bool
	buf     bytes.Buffer
	id      string
	model   string
	created int64
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

// Chunk writes one chunk as an event.
func (sw *sseWriter) Chunk(ch *cascade.Chunk) error {
	if sw.id == "" {
		sw.id, sw.model, sw.created = ch.ID, ch.Model, ch.Created
	}
	if ch.Usage != nil && !sw.usage {
		if len(ch.Choices) == 0 {
			return nil // the usage chunk the client did not ask for
		}
		c := *ch
		c.Usage = nil
		ch = &c
	}
	return sw.event(ch)
}

func (sw *sseWriter) event(v any) error {
	sw.start()
	sw.buf.Reset()
	sw.buf.WriteString("data: ")
	enc := json.NewEncoder(&sw.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	sw.buf.WriteByte('\n') // Encode wrote one newline; an event ends with a blank line
	return sw.write(sw.buf.Bytes())
}

func (sw *sseWriter) write(b []byte) error {
	_ = sw.rc.SetWriteDeadline(time.Now().Add(sw.idle))
	if _, err := sw.w.Write(b); err != nil {
		return err
	}
	return sw.rc.Flush()
}

// eocChunk is the final chunk before [DONE]: no choices, and the energy figures.
type eocChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []json.RawMessage `json:"choices"`
	EOC     eocFigures        `json:"eoc"`
}

type eocFigures struct {
	Joules      float64 `json:"joules"`
	Stage       string  `json:"stage"`
	Energy      string  `json:"energy"`
	Coverage    string  `json:"coverage,omitempty"`
	Method      string  `json:"method,omitempty"`
	Reason      string  `json:"reason,omitempty"`
	JoulesSaved float64 `json:"joules_saved,omitempty"`
	Receipt     string  `json:"receipt"`
	// BudgetRemaining is the key's joule budget left, for keys with a budget.
	BudgetRemaining *float64 `json:"budget_remaining,omitempty"`
	// BudgetCoverage is X-EOC-Budget-Coverage, with BudgetRemaining.
	BudgetCoverage string `json:"budget_coverage,omitempty"`
	eocBounds
}

// finishStream ends a stream that has begun: the final eoc chunk, [DONE] and the trailers, or, if
// the walk failed after bytes went out, a cut connection so the client sees a terminated stream.
func (s *Server) finishStream(w http.ResponseWriter, sw *sseWriter, res *cascade.Result, o outcome, err error) {
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if sw.id == "" && res.Answer != nil {
		sw.id, sw.model, sw.created = res.Answer.ID, res.Answer.Model, res.Answer.Created
	}
	final := eocChunk{ID: sw.id, Object: "chat.completion.chunk", Created: sw.created, Model: sw.model, Choices: []json.RawMessage{},
		EOC: eocFigures{Joules: o.fig.Joules, Stage: o.stage, Energy: string(o.fig.Grade), Coverage: o.fig.Coverage,
			Method: o.fig.Method, Reason: o.fig.Reason, JoulesSaved: o.fig.Saved, Receipt: o.receipt, eocBounds: boundsOf(o)}}
	if o.remaining != nil {
		final.EOC.BudgetRemaining, final.EOC.BudgetCoverage = o.remaining, o.budgetCoverage
	}
	if err := sw.event(final); err != nil {
		return
	}
	if err := sw.write([]byte("data: [DONE]\n\n")); err != nil {
		return
	}
	setEnergyHeaders(w.Header(), o)
}
