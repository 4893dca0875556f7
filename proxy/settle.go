package proxy

import (
	"errors"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/telemetry/genai"
)

// Call is one call that reached the cascade, chat-like or embeddings, as the edge settled it:
// what was asked, how it ended, what it cost and the receipt that vouches for it. It is built
// once per call (newCall, then settle) and read by everything that reports the call: the ledger
// (Options.Record, which gets the exported fields), the budget, the metrics, /ui, the calls
// endpoint, the trace and the access log. A settlement is a copy with Settles set.
type Call struct {
	Time         time.Time // when it was settled: the receipt's time
	RequestID    string
	KeyID        string
	Key          string // the request's canonical key hash; never the API key
	Model        string // as asked
	Stage        string // the stage that answered, or failed last
	Backend      string // the backend that answered; "" when none did
	Status       int    // the status the client got
	Energy       energy.Figure
	Receipt      string
	Disconnected bool
	// Attempts are the backend calls the neural stage made, in order, the answering one last
	// (nil when no backend was called).
	Attempts []cascade.BackendAttempt
	// Settles, on a settlement, is the Receipt of the call it settles: Energy is that call's
	// settled figure, Receipt and Time this settlement's own, Attempts nil. "" on a call.
	Settles string

	// What the edge alone reads. Energy is the answer's raw figure until settle rounds it. The
	// flags sit together, so that a call packs into fewer bytes: later and recorded are what
	// settle leaves for report.
	answered     bool              // a figure came back, with or without an error
	wrote        bool              // bytes went out before an error
	streamed     bool              // the answer went out as a stream
	later        bool              // the figure settles after the response (settleLater)
	recorded     bool              // the ledger took the call's record
	stages       []cascade.Attempt // the walk's stage tries
	tokens       int               // the answer's completion tokens, for the page's J per token
	promptTokens int
	op           genai.Operation  // the GenAI operation, for the per-token metrics
	firstToken   time.Duration    // from start to the stream's first chunk written; 0 when none
	timings      *cascade.Timings // the backend's own counters, for the decode time per token
	err          *APIError        // what the client was told, nil on success
	remaining    *float64         // budget left, for keys with a budget
	coverage     string           // the coverage of the key's spend this period, with remaining
	span         trace.Span
	settle       cascade.SettleFunc // how to get Energy's final figure; nil when it is final
	start        time.Time          // when the edge took the call

	// What settle leaves for report, which follows the response.
	took    time.Duration // from start to settle: the call's duration in the metrics
	label   string        // the model as the metrics name it ("" for a model no backend serves)
	held    heldCost      // what the budget holds until the figure settles (later)
	settled chan struct{} // with later: closed once the settled figure is booked
	learn   func()        // the cascade's learning of the answer, nil when none
}

// newCall is the call req makes, before its walk ends.
func newCall(id, tenant, key, model string, start time.Time, span trace.Span) *Call {
	c := new(Call)
	c.begin(id, tenant, key, model, start, span)
	return c
}

// begin makes c the call req makes, before its walk ends.
func (c *Call) begin(id, tenant, key, model string, start time.Time, span trace.Span) {
	*c = Call{RequestID: id, KeyID: tenant, Key: key, Model: model, start: start, span: span}
}

// answer takes what a walk produced: the answering stage, the stages tried, and the figure that
// came back with its backend (fig is zero when none came back).
func (c *Call) answer(stage string, stages []cascade.Attempt, answered bool, fig energy.Figure, backend string,
	attempts []cascade.BackendAttempt, settle cascade.SettleFunc) {
	c.Stage, c.stages, c.settle = stage, stages, settle
	if answered {
		c.answered, c.Energy, c.Backend, c.Attempts = true, fig, backend, attempts
	}
}

// settle runs once per call that reached the cascade, success or not, before its response: it
// fixes the call's status, figure and receipt, books the cost against the budget and writes the
// ledger record and puts the call in the calls table: what the response carries or vouches for,
// and where its client may look the receipt up the moment it has it. It points the access log at
// the call. What only reports the call follows the response (report). When the figure is
// provisional and can settle, the response does not wait for it: the call's record is written
// now, with the figure the client gets, and the budget, the metrics and the page take the
// settled figure when it comes (settleLater).
//
// The budget is settled here, not after the response: the response carries what is left, and a
// key's next call, which its client may send the moment it has this answer, must find this
// call's reservation already replaced by its cost.
func (s *Server) settle(c *Call, resv reservation, err error, lf *logFields) {
	c.Status = http.StatusOK
	c.Disconnected = disconnected(err, c.wrote)
	if err != nil {
		c.err = classify(err, c.Model)
		if c.Disconnected {
			// A write to a client that left (a broken pipe, seen before the request's context
			// is cancelled) is the client's doing, not an internal error: 499 either way.
			c.err = clientClosed(err)
		}
		c.Status = c.err.Status
		lf.err = c.err
	}
	c.Energy = c.Energy.Rounded() // the header, receipt, ledger and metrics carry the same figure
	c.Time = time.Now()
	c.Receipt = energy.Receipt{Key: c.Key, Stage: c.Stage, Model: c.Model, Joules: c.Energy.Joules,
		Grade: c.Energy.Grade, Time: c.Time}.Hash()
	later := c.settle != nil && c.Energy.Provisional
	var left budgetLeft
	var ok bool
	var held heldCost
	if later {
		// The budget takes the figure's High now, which holds the settled figure, and the
		// reservation ends with the response; the settlement books the difference (adjust).
		left, held, ok = s.budgets.settleHigh(resv, c.Energy)
	} else {
		left, ok = s.budgets.settle(resv, c.Energy)
	}
	if ok {
		joules := left.joules // allocated only for a key with a budget
		c.remaining, c.coverage = &joules, left.coverage()
	}
	model := c.Model
	if errors.Is(err, cascade.ErrModelNotFound) {
		model = "" // not a model any backend serves: keep it out of metric labels
	}
	recorded := false
	if s.opts.Record != nil {
		if rerr := s.opts.Record(*c); rerr != nil {
			s.log.Error().Err(rerr).Str("request_id", c.RequestID).Msg("ledger: record not written")
		} else {
			recorded = true
		}
	}
	lf.call = c
	c.took, c.label, c.later, c.held, c.recorded = time.Since(c.start), model, later, held, recorded
	if later {
		c.settled = make(chan struct{})
	}
	s.calls.put(c, c.settled)
}

// report follows the response of a call that settle settled: the metrics, /ui and the trace's
// call span, or, for a figure that settles later, the wait for it (settleLater); then the
// cascade's learning of the answer. The handler runs it after its response is flushed, before it
// returns, so a keep-alive client's next call on the same connection finds the answer learned;
// WaitReported waits for it.
func (s *Server) report(c *Call) {
	if c.later {
		endCall(c)
		s.settleLater(c, c.held, c.recorded, c.label, c.took)
	} else {
		s.observe(c, c.label)
	}
	if c.learn != nil {
		_ = s.guard(c.RequestID, func() error { c.learn(); return nil }) // a learner's panic is logged
	}
}

// WaitReported waits until every request served so far has ended: its response, its report,
// its trace span and its access log line (tests read what those fed). Call it only while no
// request is being served.
func (s *Server) WaitReported() { s.handling.Wait() }

// flush sends what the handler wrote, so that what follows it (report, the access log) does not
// delay the client.
func flush(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// disconnected tells a client that went away from the other ways a call can fail: a cancelled
// context, or, once bytes went out, an error that is neither a backend's nor a deadline (a
// write to the client that failed). An upstream that failed mid-stream and a timeout are not
// the client's doing.
func disconnected(err error, wrote bool) bool {
	f := cascade.Classify(err)
	if wrote {
		f = f.AfterWrite()
	}
	return f == cascade.ClientGone
}
