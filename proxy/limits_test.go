package proxy

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestRateLimitsSlideOverAMinute(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	l := newLimiter([]APIKey{{ID: "k", Limits: &Rate{RPM: 3, TPM: 100}}, {ID: "free"}}, nil, func() time.Time { return now })
	ctx := context.Background()
	for i := range 3 {
		if e := l.take(ctx, "k"); e != nil {
			t.Fatalf("call %d refused: %v", i, e)
		}
		now = now.Add(10 * time.Second)
	}
	e := l.take(ctx, "k")
	if e == nil || e.Status != 429 || e.Code != "rate_limit_exceeded" || e.RetryAfter != 30*time.Second {
		t.Fatalf("4th call in the minute: %+v", e)
	}
	now = now.Add(31 * time.Second) // the first call left the window
	if e := l.take(ctx, "k"); e != nil {
		t.Fatalf("after the window slid: %v", e)
	}
	l.addTokens("k", 100)
	now = now.Add(time.Second)
	if e := l.take(ctx, "k"); e == nil || e.RetryAfter != 59*time.Second {
		t.Fatalf("tokens spent: %+v", e)
	}
	for range 10 {
		if e := l.take(ctx, "free"); e != nil {
			t.Fatal("a key without limits was limited")
		}
	}
}

// sharedDown is a store that cannot answer.
type sharedDown struct{}

func (sharedDown) Take(context.Context, string, int, int) (bool, time.Duration, error) {
	return false, 0, errors.New("down")
}
func (sharedDown) AddTokens(context.Context, string, int) error { return errors.New("down") }

func TestRateLimitsFallBackWhenSharedIsDown(t *testing.T) {
	l := newLimiter([]APIKey{{ID: "k", Limits: &Rate{RPM: 2}}}, sharedDown{}, time.Now)
	ctx := context.Background()
	for i := range 2 {
		if l.take(ctx, "k") != nil {
			t.Fatalf("call %d refused within the limit", i)
		}
	}
	if l.take(ctx, "k") == nil {
		t.Fatal("the local count did not hold with the store down")
	}
}
