package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Budgets keeps the joule budgets' figures in Redis for every replica (proxy.SharedBudgets).
// Per tenant (an API key's id), a hash eoc:budget:{id} holds the period, the joules spent in it,
// how many of those came from partial figures ('partial') and the largest cost ever settled,
// a sorted set eoc:budget:{id}:inflight the calls in flight, scored by when they stop counting
// (a replica that died mid-call), and a sorted set eoc:budget:{id}:settled the reservations settled in the
// last hour, scored by when they are forgotten. None of these keys carries a TTL, so a Redis
// run with maxmemory-policy volatile-lru never evicts them (only the cache's entries, which all
// expire); the scripts trim the sets' members by score instead. The admission rule runs in one Lua
// script, so replicas cannot both take the last room; it is proxy.decide's rule, and Redis's
// clock times the reservations. An admission that gets no answer (a hung Redis, which may run it
// when it resumes) is released once Redis answers again, so it holds no room until its hold.
type Budgets struct{ c *Client }

// Budgets returns the shared budget figures.
func (c *Client) Budgets() *Budgets { return &Budgets{c: c} }

func budgetKeys(tenant string) []string {
	h := "eoc:budget:{" + tenant + "}"
	return []string{h, h + ":inflight", h + ":settled"}
}

// rollLua starts a new period's spend, whole, when ARGV[1] is a later period than the stored
// one. It rolls forward only: periods are YYYY-MM[-DD] strings, which compare as dates, and a
// replica whose clock is a little slow, still in yesterday, adds its cost to today's spend
// instead of wiping it.
const rollLua = `
local p = redis.call('HGET', KEYS[1], 'period')
if not p or p < ARGV[1] then
  redis.call('HSET', KEYS[1], 'period', ARGV[1], 'spent', '0', 'partial', '0')
end
`

// ARGV: period, limit, headroom, hold (ms), id. Returns verdict, spent, reserved. An id already
// settled or released (an admission that ran after its caller gave up on it) reserves nothing.
var admitScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
` + rollLua + `
local spent = tonumber(redis.call('HGET', KEYS[1], 'spent') or '0')
local max = tonumber(redis.call('HGET', KEYS[1], 'max') or '0')
local n = redis.call('ZCARD', KEYS[2])
local limit = tonumber(ARGV[2])
local r = max * tonumber(ARGV[3])
local verdict = 1
if spent >= limit then
  verdict = 2
elseif max <= 0 and n > 0 then
  verdict = 1
elseif n == 0 or spent + (n + 1) * r <= limit then
  verdict = 0
end
if verdict == 0 and redis.call('ZSCORE', KEYS[3], ARGV[5]) then
  verdict = 1
end
if verdict == 0 then
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[4]), ARGV[5])
  n = n + 1
end
return {verdict, tostring(spent), tostring(n * r)}
`)

// ARGV: period, id ("" for none), cost, headroom, partial ("1" when the cost came from a partial
// figure). Returns spent, reserved, partial. A reservation is settled once: a settle retried
// after a lost reply, within settledFor, books nothing more.
var settleScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local again = false
if ARGV[2] ~= '' then
  redis.call('ZREM', KEYS[2], ARGV[2])
  again = redis.call('ZADD', KEYS[3], 'NX', now + ` + settledForMs + `, ARGV[2]) == 0
end
` + rollLua + `
local cost = tonumber(ARGV[3])
local spent = redis.call('HGET', KEYS[1], 'spent') or '0'
if not again then
  spent = redis.call('HINCRBYFLOAT', KEYS[1], 'spent', ARGV[3])
  if ARGV[5] == '1' then redis.call('HINCRBYFLOAT', KEYS[1], 'partial', ARGV[3]) end
end
local partial = redis.call('HGET', KEYS[1], 'partial') or '0'
local max = tonumber(redis.call('HGET', KEYS[1], 'max') or '0')
if cost > max then
  redis.call('HSET', KEYS[1], 'max', ARGV[3])
  max = cost
end
return {spent, tostring(redis.call('ZCARD', KEYS[2]) * max * tonumber(ARGV[4])), partial}
`)

// ARGV: period, headroom. Returns spent, reserved, partial; a period older than the stored one
// reads the stored (current) spend, as rollLua books into it. Like admission and settle, it
// drops the reservations past their hold first (a replica that died mid-call), so the reserved
// joules it reports are those of calls still in flight.
var usageScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local spent, partial = '0', '0'
local p = redis.call('HGET', KEYS[1], 'period')
if p and p >= ARGV[1] then
  spent = redis.call('HGET', KEYS[1], 'spent') or '0'
  partial = redis.call('HGET', KEYS[1], 'partial') or '0'
end
local max = tonumber(redis.call('HGET', KEYS[1], 'max') or '0')
return {spent, tostring(redis.call('ZCARD', KEYS[2]) * max * tonumber(ARGV[2])), partial}
`)

// ARGV: id. Ends a reservation whose admission got no answer, and remembers its id as settled,
// so an admission that Redis runs later still reserves nothing (admitScript).
var releaseScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], 'NX', now + ` + settledForMs + `, ARGV[1])
return 1
`)

// settledForMs is how long (ms) a settled reservation's id is remembered: an hour.
const settledForMs = "3600000"

// OnBack registers f to run (in its own goroutine) each time Redis comes back after an outage.
func (b *Budgets) OnBack(f func()) { b.c.OnBack(f) }

func fmtF(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// Admit applies the admission rule to tenant atomically; on verdict 0 id names the reservation.
func (b *Budgets) Admit(ctx context.Context, tenant, period string, limit, headroom float64, hold time.Duration) (id string, verdict int, spent, reserved float64, err error) {
	id = newID()
	var res []any
	sent := false
	err = b.c.do(ctx, func(ctx context.Context, rdb *redis.Client) error {
		sent = true
		var err error
		res, err = admitScript.Run(ctx, rdb, budgetKeys(tenant), period, fmtF(limit), fmtF(headroom), hold.Milliseconds(), id).Slice()
		return err
	})
	if err != nil {
		var re redis.Error
		if sent && !errors.As(err, &re) {
			// No answer: Redis may hold the script and run it later, reserving for a call that
			// by then runs on local figures. Release the id once Redis answers again.
			b.c.addOrphan(tenant, id)
		}
		return "", 0, 0, 0, err
	}
	b.c.kickOrphans()
	v, _ := res[0].(int64)
	spent, reserved = parseF(res[1]), parseF(res[2])
	if v != 0 {
		id = ""
	}
	return id, int(v), spent, reserved, nil
}

// Settle books cost, from a partial figure when partial is true, and ends reservation id (""
// books the cost alone). partialSpent is how many of the period's spent joules came from
// partial figures.
func (b *Budgets) Settle(ctx context.Context, tenant, period, id string, cost float64, partial bool, headroom float64) (spent, reserved, partialSpent float64, err error) {
	p := "0"
	if partial {
		p = "1"
	}
	return b.usage(ctx, settleScript, tenant, period, id, fmtF(cost), fmtF(headroom), p)
}

// Usage is tenant's spent and reserved joules for period, and how many of the spent joules came
// from partial figures.
func (b *Budgets) Usage(ctx context.Context, tenant, period string, headroom float64) (spent, reserved, partialSpent float64, err error) {
	return b.usage(ctx, usageScript, tenant, period, fmtF(headroom))
}

// usage runs a script that returns spent, reserved and partial joules.
func (b *Budgets) usage(ctx context.Context, s *redis.Script, tenant string, args ...any) (spent, reserved, partial float64, err error) {
	var res []any
	err = b.c.do(ctx, func(ctx context.Context, rdb *redis.Client) error {
		var err error
		res, err = s.Run(ctx, rdb, budgetKeys(tenant), args...).Slice()
		return err
	})
	if err != nil {
		return 0, 0, 0, err
	}
	if len(res) != 3 {
		return 0, 0, 0, fmt.Errorf("budget script: %d values, want 3", len(res))
	}
	return parseF(res[0]), parseF(res[1]), parseF(res[2]), nil
}

func parseF(v any) float64 {
	s, _ := v.(string)
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// orphan is a reservation whose admission got no answer.
type orphan struct{ tenant, id string }

// maxOrphans bounds the reservations kept for release; past it they expire with their hold.
const maxOrphans = 10000

func (c *Client) addOrphan(tenant, id string) {
	c.mu.Lock()
	if len(c.orphans) < maxOrphans {
		c.orphans = append(c.orphans, orphan{tenant, id})
	}
	c.mu.Unlock()
}

// kickOrphans starts releaseOrphans in the background when reservations wait for release and
// none runs; it never blocks.
func (c *Client) kickOrphans() {
	c.mu.Lock()
	start := len(c.orphans) > 0 && !c.releasing
	if start {
		c.releasing = true
	}
	c.mu.Unlock()
	if start {
		go c.releaseOrphans()
	}
}

// releaseOrphans ends, off every call's path, the reservations whose admission got no answer. It
// stops at the first failure and keeps the rest for the next time Redis answers.
func (c *Client) releaseOrphans() {
	for {
		c.mu.Lock()
		if len(c.orphans) == 0 {
			c.releasing = false
			c.mu.Unlock()
			return
		}
		o := c.orphans[0]
		c.mu.Unlock()
		err := c.do(context.Background(), func(ctx context.Context, rdb *redis.Client) error {
			return releaseScript.Run(ctx, rdb, budgetKeys(o.tenant), o.id).Err()
		})
		var re redis.Error
		if errors.As(err, &re) {
			err = nil // Redis answered, with an error: retrying would get the same one
		}
		c.mu.Lock()
		if err != nil {
			c.releasing = false
			c.mu.Unlock()
			return
		}
		c.orphans = c.orphans[1:]
		c.mu.Unlock()
	}
}
