package energy

import "sync"

// Reasons a Saved figure carries, joined to the figure's Reason. A saving is never measured: it
// is what a call that was not made would have cost.
const (
	// SavedRunningMeasured: the model's running mean of measured neural calls on this proxy.
	SavedRunningMeasured = "saved-running-measured"
	// SavedRunningEstimated: the model's running mean of estimated neural calls (none measured yet).
	SavedRunningEstimated = "saved-running-estimated"
	// SavedStated: the stage's stated constant, since this proxy has not yet called the model.
	SavedStated = "saved-stated"
)

// DefaultTrackerWeight is the weight of the newest call in a Tracker's running means.
const DefaultTrackerWeight = 0.2

// maxTrackedModels bounds a Tracker's memory: a backend that serves any model name would
// otherwise let clients grow it without end. Models past the bound have no running figure.
const maxTrackedModels = 4096

// Tracker keeps this proxy's running figure of what a neural call costs, per model: exponentially
// weighted means of joules per call and joules per completion token, kept apart for measured and
// estimated figures so that a measured one is preferred. The neural stage feeds it (Observe); the
// memoizing stages ask it what an answer saved (Estimate). The zero value is not usable (use
// NewTracker); a Tracker is safe for concurrent use.
type Tracker struct {
	weight float64

	mu     sync.Mutex
	models map[string]*modelCost
}

// modelCost is one model's running means: [0] measured, [1] estimated.
type modelCost struct{ means [2]means }

type means struct {
	calls, tokenCalls int
	perCall, perToken float64
}

// NewTracker returns an empty Tracker whose means give the newest call weight w (0 < w ≤ 1;
// anything else is DefaultTrackerWeight).
func NewTracker(w float64) *Tracker {
	if !(w > 0 && w <= 1) {
		w = DefaultTrackerWeight
	}
	return &Tracker{weight: w, models: map[string]*modelCost{}}
}

// Observe records one completed neural call of model: its figure and its completion tokens. A
// figure that was never computed, or of no joules, is ignored.
func (t *Tracker) Observe(model string, f Figure, completionTokens int) {
	if f.IsZero() || !(f.Joules > 0) {
		return
	}
	i := 1
	if f.Measured() {
		i = 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.models[model]
	if c == nil {
		if len(t.models) >= maxTrackedModels {
			return
		}
		c = &modelCost{}
		t.models[model] = c
	}
	m := &c.means[i]
	m.perCall = t.mix(m.perCall, f.Joules, m.calls)
	m.calls++
	if completionTokens > 0 {
		m.perToken = t.mix(m.perToken, f.Joules/float64(completionTokens), m.tokenCalls)
		m.tokenCalls++
	}
}

func (t *Tracker) mix(mean, x float64, n int) float64 {
	if n == 0 {
		return x
	}
	return mean + t.weight*(x-mean)
}

// Estimate is what a call of model would have cost to write an answer of completionTokens
// tokens: the running joules per completion token × the tokens when both are known, else the
// running joules per call. Measured means are preferred to estimated ones. reason is
// SavedRunningMeasured or SavedRunningEstimated; ok is false while this proxy has no figure for
// the model.
func (t *Tracker) Estimate(model string, completionTokens int) (joules float64, reason string, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.models[model]
	if c == nil {
		return 0, "", false
	}
	for i, r := range [2]string{SavedRunningMeasured, SavedRunningEstimated} {
		m := c.means[i]
		switch {
		case m.tokenCalls > 0 && completionTokens > 0:
			return m.perToken * float64(completionTokens), r, true
		case m.calls > 0:
			return m.perCall, r, true
		}
	}
	return 0, "", false
}

// PerToken is the running joules per completion token of model: the measured mean when there is
// one (measured true), else the estimated one; ok is false while neither is known.
func (t *Tracker) PerToken(model string) (joules float64, measured, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.models[model]
	if c == nil {
		return 0, false, false
	}
	for i := range c.means {
		if m := c.means[i]; m.tokenCalls > 0 {
			return m.perToken, i == 0, true
		}
	}
	return 0, false, false
}

// Calls is how many calls have been observed for model, with or without completion tokens.
func (t *Tracker) Calls(model string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.models[model]
	if c == nil {
		return 0
	}
	return c.means[0].calls + c.means[1].calls
}
