package proxy

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// uiMinutes is how many one-minute slots the page's "last minutes" plots cover.
const uiMinutes = 15

// uiRecent is how many calls the page lists.
const uiRecent = 50

// uiModels bounds the models the page keeps figures for, as maxModelLabels bounds the metrics'
// labels: the page takes the metrics' label of a model (a model no backend lists is "other"),
// and without metrics, a model beyond the first uiModels, or with a name longer than
// uiModelName bytes, is "other" too. The list of calls keeps at most uiModelName bytes of a name.
const (
	uiModels    = maxModelLabels
	uiModelName = 128
)

// uiStats aggregates the settled calls for GET /ui. It is fed by settle, the same path that feeds
// /metrics and the ledger, with the same rounded figure and the same labels, so the page's totals
// equal eoc_joules_total. An update takes a mutex and, once a stage, model or reason has been
// seen, allocates nothing: the maps only grow by new keys, the minute slots are reused and the
// recent calls are a ring. The zero value is not usable; a nil *uiStats ignores updates. It is
// safe for concurrent use.
type uiStats struct {
	mu     sync.Mutex
	start  time.Time
	stages map[string]*uiTotal // since start, by stage: equals eoc_joules_total summed by stage
	models map[string]*uiTotal // since start, by model
	pairs  map[uiPair]*uiPairStats
	slots  [uiMinutes]uiSlot
	recent [uiRecent]UICall
	next   int // the ring's next write
	filled int
}

type uiTotal struct {
	Calls  int     `json:"calls"`
	Joules float64 `json:"joules"`
	Saved  float64 `json:"saved"`
}

type uiPair struct{ model, backend string }

// uiPairStats are one model on one backend: the neural calls and how their figures were graded.
type uiPairStats struct {
	calls           int
	measured        int
	estimated       int
	measuredJoules  float64 // the completion part of the measured figures split over completion tokens
	measuredTokens  int
	reasons         map[string]int // the estimated or partial figures' reasons
	estimatedJoules float64
	estimatedTokens int
	lastMethod      string
}

// uiSlot is one minute of joules by stage and by model.
type uiSlot struct {
	minute int64 // unix minute; the slot holds nothing of another minute
	stages map[string]float64
	models map[string]float64
	saved  float64
}

// UICall is one row of the page's last calls: what was settled, never a prompt or a completion.
// The figure is embedded whole, so a field the energy package adds (bounds, say) reaches the page
// with its own JSON name and no change here.
type UICall struct {
	Time    time.Time `json:"time"`
	Stage   string    `json:"stage"`
	Model   string    `json:"model"`
	Backend string    `json:"backend"`
	Status  int       `json:"status"`
	Tokens  int       `json:"completion_tokens"`
	Receipt string    `json:"receipt"`
	// SettledReceipt is the settlement record's receipt, of the settled figure shown, when the
	// call's figure settled after its response (Receipt, the client's, is of the provisional one).
	SettledReceipt string `json:"settled_receipt,omitempty"`
	energy.Figure
}

// observe hands one settled call to the metrics, the page's figures and the call's span: report's
// one call for them all, the model labelled once for both the metrics and the page.
func (s *Server) observe(c *Call, model string) {
	model = s.metrics.label(model)
	s.metrics.observe(c, c.Energy, model, c.took)
	s.ui.observe(c, model, c.Energy, "", c.Time)
	endCall(c)
}

func newUIStats(now time.Time) *uiStats {
	return &uiStats{start: now, stages: map[string]*uiTotal{}, models: map[string]*uiTotal{}, pairs: map[uiPair]*uiPairStats{}}
}

// observe counts one settled call c. model is the label /metrics used; fig is c's final figure
// (its own, or its settlement's, whose receipt is settledReceipt).
func (u *uiStats) observe(c *Call, model string, fig energy.Figure, settledReceipt string, now time.Time) {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.models[model]; !ok && (len(u.models) >= uiModels || len(model) > uiModelName) {
		model = otherModel
	}
	stage := c.Stage
	asked := c.Model
	if len(asked) > uiModelName {
		asked = strings.Clone(strings.ToValidUTF8(asked[:uiModelName], ""))
	}
	u.recent[u.next] = UICall{Time: now, Stage: stage, Model: asked, Backend: c.Backend, Status: c.Status,
		Tokens: c.tokens, Receipt: c.Receipt, SettledReceipt: settledReceipt, Figure: fig}
	u.next = (u.next + 1) % uiRecent
	u.filled = min(u.filled+1, uiRecent)
	if !c.answered {
		return
	}
	add(u.stages, stage, fig)
	add(u.models, model, fig)
	m := now.Unix() / 60
	s := &u.slots[m%uiMinutes]
	if s.minute != m {
		s.minute, s.saved = m, 0
		if s.stages == nil {
			s.stages, s.models = map[string]float64{}, map[string]float64{}
		}
		clear(s.stages)
		clear(s.models)
	}
	s.stages[stage] += fig.Joules
	s.models[model] += fig.Joules
	s.saved += fig.Saved
	if c.Backend == "" {
		return
	}
	p := u.pairs[uiPair{model, c.Backend}]
	if p == nil {
		p = &uiPairStats{reasons: map[string]int{}}
		u.pairs[uiPair{model, c.Backend}] = p
	}
	p.calls++
	p.lastMethod = fig.Method
	if fig.Reason != "" {
		p.reasons[fig.Reason]++
	}
	// Joules per completion token means here what it means in the eoc chunk and headers
	// (Figure.PerToken): the figure's completion part over the completion tokens it split over,
	// not the whole figure (prompt included).
	if fig.Measured() {
		p.measured++
		if fig.CompletionTokens > 0 {
			p.measuredJoules += fig.CompletionJoules
			p.measuredTokens += fig.CompletionTokens
		}
		return
	}
	p.estimated++
	if fig.CompletionTokens > 0 {
		p.estimatedJoules += fig.CompletionJoules
		p.estimatedTokens += fig.CompletionTokens
	}
}

func add(m map[string]*uiTotal, k string, fig energy.Figure) {
	t := m[k]
	if t == nil {
		t = &uiTotal{}
		m[k] = t
	}
	t.Calls++
	t.Joules += fig.Joules
	t.Saved += fig.Saved
}

// UIData is what GET /ui/data answers: the page draws it as it is.
type UIData struct {
	Now      time.Time `json:"now"`
	Since    time.Time `json:"since"`
	Auth     bool      `json:"auth"` // the page was served behind an admin key
	Stages   []UIRow   `json:"stages"`
	Models   []UIRow   `json:"models"`
	Saved    UISaved   `json:"saved"`
	Minutes  []UIMin   `json:"minutes"`
	Backends []UIPair  `json:"backends"`
	Calls    []UICall  `json:"calls"` // newest first
	Counters []Counter `json:"counters"`
	Budgets  []UIKey   `json:"budgets"`
}

// UIRow is a total since the proxy started, by stage or by model.
type UIRow struct {
	Name string `json:"name"`
	uiTotal
}

// UISaved is what the memoizing stages saved: what their answers' originals cost, and that as a
// share of what the neural stage would have spent had it answered every call (its own joules plus
// the saved ones).
type UISaved struct {
	Joules       float64            `json:"joules"`
	ByStage      map[string]float64 `json:"by_stage"`
	NeuralJoules float64            `json:"neural_joules"`
	Share        float64            `json:"share"` // 0..1; 0 when nothing was spent or saved
}

// UIMin is one minute's joules, oldest first.
type UIMin struct {
	Minute time.Time          `json:"minute"`
	Stages map[string]float64 `json:"stages"`
	Models map[string]float64 `json:"models"`
	Saved  float64            `json:"saved"`
}

// UIPair is one model on one backend.
type UIPair struct {
	Model     string `json:"model"`
	Backend   string `json:"backend"`
	Calls     int    `json:"calls"`
	Measured  int    `json:"measured"`
	Estimated int    `json:"estimated"`
	// JoulesPerToken is the measured figures' completion joules per completion token, as the
	// eoc chunk's joules_per_completion_token (null until a measured figure split over
	// completion tokens); EstimatedPerToken the same over estimated figures.
	JoulesPerToken    *float64       `json:"joules_per_completion_token"`
	EstimatedPerToken *float64       `json:"estimated_joules_per_completion_token"`
	Reasons           map[string]int `json:"reasons"`
	Method            string         `json:"method"`
}

// Counter is one energy counter's liveness, as `eoc-proxy meter` and eoc_meter_counter_live
// report it.
type Counter struct {
	Name   string `json:"name"`
	Live   bool   `json:"live"`
	Reason string `json:"reason,omitempty"`
}

// UIKey is one key's budget.
type UIKey struct {
	ID     string  `json:"id"`
	Budget float64 `json:"budget"`
	Per    string  `json:"per"`
	Left   float64 `json:"left"`
	// Coverage is X-EOC-Budget-Coverage's: partial when some of the period's spend came from
	// partial figures, so Left is an upper bound.
	Coverage string `json:"coverage"`
}

// snapshot copies the figures out for the page.
func (u *uiStats) snapshot(now time.Time) UIData {
	u.mu.Lock()
	defer u.mu.Unlock()
	d := UIData{Now: now, Since: u.start, Saved: UISaved{ByStage: map[string]float64{}}}
	for name, t := range u.stages {
		d.Stages = append(d.Stages, UIRow{Name: name, uiTotal: *t})
		if t.Saved > 0 {
			d.Saved.ByStage[name] = energy.RoundNano(t.Saved)
			d.Saved.Joules += t.Saved
		}
	}
	if t := u.stages["neural"]; t != nil {
		d.Saved.NeuralJoules = t.Joules
	}
	if all := d.Saved.NeuralJoules + d.Saved.Joules; all > 0 {
		d.Saved.Share = d.Saved.Joules / all
	}
	d.Saved.Joules = energy.RoundNano(d.Saved.Joules)
	for name, t := range u.models {
		d.Models = append(d.Models, UIRow{Name: name, uiTotal: *t})
	}
	byName := func(a, b UIRow) int { return cmp.Compare(a.Name, b.Name) }
	slices.SortFunc(d.Stages, byName)
	slices.SortFunc(d.Models, byName)
	for i := range d.Stages {
		d.Stages[i].Joules = energy.RoundNano(d.Stages[i].Joules)
	}
	for i := range d.Models {
		d.Models[i].Joules = energy.RoundNano(d.Models[i].Joules)
	}
	cur := now.Unix() / 60
	for m := cur - uiMinutes + 1; m <= cur; m++ {
		row := UIMin{Minute: time.Unix(m*60, 0).UTC(), Stages: map[string]float64{}, Models: map[string]float64{}}
		if s := &u.slots[m%uiMinutes]; s.minute == m {
			for k, v := range s.stages {
				row.Stages[k] = energy.RoundNano(v)
			}
			for k, v := range s.models {
				row.Models[k] = energy.RoundNano(v)
			}
			row.Saved = energy.RoundNano(s.saved)
		}
		d.Minutes = append(d.Minutes, row)
	}
	for k, p := range u.pairs {
		row := UIPair{Model: k.model, Backend: k.backend, Calls: p.calls, Measured: p.measured, Estimated: p.estimated,
			Reasons: make(map[string]int, len(p.reasons)), Method: p.lastMethod}
		for r, n := range p.reasons {
			row.Reasons[r] = n
		}
		if p.measuredTokens > 0 {
			v := p.measuredJoules / float64(p.measuredTokens)
			row.JoulesPerToken = &v
		}
		if p.estimatedTokens > 0 {
			v := p.estimatedJoules / float64(p.estimatedTokens)
			row.EstimatedPerToken = &v
		}
		d.Backends = append(d.Backends, row)
	}
	slices.SortFunc(d.Backends, func(a, b UIPair) int {
		if c := cmp.Compare(a.Model, b.Model); c != 0 {
			return c
		}
		return cmp.Compare(a.Backend, b.Backend)
	})
	d.Calls = make([]UICall, 0, u.filled)
	for i := 1; i <= u.filled; i++ {
		d.Calls = append(d.Calls, u.recent[(u.next-i+uiRecent)%uiRecent])
	}
	return d
}
