package proxy

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

// outcome is what one call cost, the receipt that vouches for it, and how it ended.
type outcome struct {
	stage   string
	fig     energy.Figure
	receipt string
	// receiptTime is the receipt's Time (X-EOC-Receipt-Time).
	receiptTime time.Time
	remaining   *float64 // budget left, for keys with a budget
	apiErr      *APIError

	// budgetCoverage is the coverage of the key's spend this period, with remaining.
	budgetCoverage string
}

// settlement is what settle needs to know about one call that reached the cascade, a chat
// completion or an embeddings call.
type settlement struct {
	id, tenant, key, model string
	stage                  string
	attempts               []cascade.Attempt
	answered               bool // a figure came back, with or without an error
	fig                    energy.Figure
	backend                string
	backendAttempts        []cascade.BackendAttempt
	wrote                  bool // bytes went out before an error
	tokens                 int  // the answer's completion tokens, for the page's J per token
	promptTokens           int
	span                   trace.Span         // the call's span: a no-op one when untraced
	settle                 cascade.SettleFunc // how to get fig's final figure; nil when it is final
}

// settle runs once per call that reached the cascade, success or not: it computes the receipt,
// books the cost against the budget, writes the ledger record and the metrics, and fills the
// access log's fields. When the figure is provisional and can settle, the response does not wait
// for it: the call's record is written now, with the figure the client gets, and the budget,
// the metrics and the page take the settled figure when it comes (settleLater).
func (s *Server) settle(st settlement, resv reservation, err error, start time.Time, lf *logFields) outcome {
	o := outcome{stage: st.stage}
	status := http.StatusOK
	gone := disconnected(err, st.wrote)
	if err != nil {
		o.apiErr = classify(err, st.model)
		if gone {
			// A write to a client that left (a broken pipe, seen before the request's context
			// is cancelled) is the client's doing, not an internal error: 499 either way.
			o.apiErr = clientClosed(err)
		}
		status = o.apiErr.Status
		lf.err = o.apiErr
	}
	if st.answered {
		o.fig = st.fig
		lf.backend = st.backend
	}
	o.fig = o.fig.Rounded() // the header, receipt, ledger and metrics carry the same figure
	now := time.Now()
	o.receipt = energy.Receipt{Key: st.key, Stage: o.stage, Model: st.model, Joules: o.fig.Joules,
		Grade: o.fig.Grade, Time: now}.Hash()
	o.receiptTime = now
	later := st.settle != nil && o.fig.Provisional
	var left budgetLeft
	var ok bool
	var held heldCost
	if later {
		// The budget takes the figure's High now, which holds the settled figure, and the
		// reservation ends with the response; the settlement books the difference (adjust).
		left, held, ok = s.budgets.settleHigh(resv, o.fig)
	} else {
		left, ok = s.budgets.settle(resv, o.fig)
	}
	if ok {
		joules := left.joules // allocated only for a key with a budget
		o.remaining, o.budgetCoverage = &joules, left.coverage()
	}
	model := st.model
	if errors.Is(err, cascade.ErrModelNotFound) {
		model = "" // not a model any backend serves: keep it out of metric labels
	}
	call := Call{Time: now, RequestID: st.id, KeyID: st.tenant, Key: st.key, Model: st.model, Stage: o.stage,
		Backend: lf.backend, Status: status, Energy: o.fig, Receipt: o.receipt, Attempts: st.backendAttempts,
		Disconnected: gone}
	recorded := false
	if s.opts.Record != nil {
		if rerr := s.opts.Record(call); rerr != nil {
			s.log.Error().Err(rerr).Str("request_id", st.id).Msg("ledger: record not written")
		} else {
			recorded = true
		}
	}
	if later {
		endCall(st.span, &st, o, status)
		s.settleLater(st, held, o, call, recorded, model, status, time.Since(start))
	} else {
		s.calls.put(st.tenant, st.id, o, nil)
		s.metrics.observe(st.stage, st.attempts, st.answered, o.fig, model, status, time.Since(start))
		s.observe(&st, o, model, status, now)
	}
	if n := len(st.attempts); n > 0 {
		lf.upstream = st.attempts[n-1].Duration
	}
	lf.stage, lf.joules, lf.grade, lf.method, lf.saved = o.stage, o.fig.Joules, string(o.fig.Grade), o.fig.Method, o.fig.Saved
	lf.provisional = o.fig.Provisional
	return o
}

// disconnected tells a client that went away from the other ways a call can fail: a cancelled
// context, or a write that failed after bytes went out. An upstream that failed mid-stream (a
// backend or upstream error) and a timeout are not the client's doing.
func disconnected(err error, wrote bool) bool {
	if errors.Is(err, context.Canceled) {
		return true
	}
	if err == nil || !wrote || isTimeout(err) {
		return false
	}
	var be *cascade.BackendError
	var up *cascade.UpstreamError
	return !errors.As(err, &be) && !errors.As(err, &up)
}
