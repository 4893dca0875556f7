package proxy

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Rate limits one key's calls per sliding minute: RPM calls and TPM completion tokens (0: no
// limit). A call is refused while the key has RPM calls in the last minute, or has spent TPM
// completion tokens in it; the tokens are counted when a call ends, so the call that crosses
// TPM runs to its end.
type Rate struct {
	RPM int
	TPM int
}

// SharedLimits counts calls and tokens where every replica sees them (cluster.Limits, Lua on
// Redis). An error means the store cannot answer: the edge then counts on this replica alone.
type SharedLimits interface {
	// Take admits one call of key under rpm and tpm, or says how long to wait.
	Take(ctx context.Context, key string, rpm, tpm int) (ok bool, retry time.Duration, err error)
	// AddTokens books a call's completion tokens.
	AddTokens(ctx context.Context, key string, tokens int) error
}

const rateWindow = time.Minute

// limiter applies the keys' rates, on shared counts or its own. It is safe for concurrent use.
type limiter struct {
	rates  map[string]Rate
	shared SharedLimits
	now    func() time.Time

	mu    sync.Mutex
	calls map[string][]time.Time // admitted calls within the window, oldest first
	toks  map[string][]tokenMark // completion tokens booked within the window, oldest first
}

type tokenMark struct {
	at time.Time
	n  int
}

func newLimiter(keys []APIKey, shared SharedLimits, now func() time.Time) *limiter {
	l := &limiter{rates: map[string]Rate{}, shared: shared, now: now, calls: map[string][]time.Time{}, toks: map[string][]tokenMark{}}
	for _, k := range keys {
		if k.Limits != nil && (k.Limits.RPM > 0 || k.Limits.TPM > 0) {
			l.rates[k.ID] = *k.Limits
		}
	}
	return l
}

// take admits one call of key, or returns a 429 with Retry-After.
func (l *limiter) take(ctx context.Context, key string) *APIError {
	r, ok := l.rates[key]
	if !ok {
		return nil
	}
	if l.shared != nil {
		ok, retry, err := l.shared.Take(ctx, key, r.RPM, r.TPM)
		if err == nil {
			if ok {
				return nil
			}
			return rateLimited(key, r, retry)
		}
	}
	if ok, retry := l.takeLocal(key, r); !ok {
		return rateLimited(key, r, retry)
	}
	return nil
}

func (l *limiter) takeLocal(key string, r Rate) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	since := now.Add(-rateWindow)
	calls := l.calls[key]
	for len(calls) > 0 && !calls[0].After(since) {
		calls = calls[1:]
	}
	toks := l.toks[key]
	for len(toks) > 0 && !toks[0].at.After(since) {
		toks = toks[1:]
	}
	l.calls[key], l.toks[key] = calls, toks
	if r.TPM > 0 {
		used := 0
		for _, m := range toks {
			used += m.n
		}
		if used >= r.TPM {
			return false, toks[0].at.Add(rateWindow).Sub(now)
		}
	}
	if r.RPM > 0 {
		if len(calls) >= r.RPM {
			return false, calls[0].Add(rateWindow).Sub(now)
		}
		l.calls[key] = append(calls, now)
	}
	return true, 0
}

// addTokens books a finished call's completion tokens against key's TPM.
func (l *limiter) addTokens(key string, n int) {
	r, ok := l.rates[key]
	if !ok || r.TPM <= 0 || n <= 0 {
		return
	}
	if l.shared != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := l.shared.AddTokens(ctx, key, n)
		cancel()
		if err == nil {
			return
		}
	}
	l.mu.Lock()
	l.toks[key] = append(l.toks[key], tokenMark{at: l.now(), n: n})
	l.mu.Unlock()
}

func rateLimited(key string, r Rate, retry time.Duration) *APIError {
	retry = max(retry, time.Second)
	return &APIError{Status: http.StatusTooManyRequests, Type: "requests", Code: "rate_limit_exceeded", RetryAfter: retry,
		Message: fmt.Sprintf("rate limit reached for key %q (%d requests, %d completion tokens per minute); retry in %ds",
			key, r.RPM, r.TPM, int(retry.Round(time.Second)/time.Second))}
}
