package cluster

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Limits counts the tenants' rate limits for every replica (proxy.SharedLimits): per tenant, a
// sorted set eoc:rate:{id}:calls of the calls admitted in the last minute (a sliding log, so
// exactly RPM calls pass in any minute) and a hash eoc:rate:{id}:tokens of completion tokens
// per second. Redis's clock times both. Neither key carries a TTL (so volatile-lru never evicts
// them): the scripts trim what is older than a minute.
type Limits struct{ c *Client }

// Limits returns the shared rate-limit counts.
func (c *Client) Limits() *Limits { return &Limits{c: c} }

func limitKeys(tenant string) []string {
	h := "eoc:rate:{" + tenant + "}"
	return []string{h + ":calls", h + ":tokens"}
}

// ARGV: rpm, tpm, id. Returns admitted (1/0) and the wait in ms.
var takeScript = redis.NewScript(`
local t = redis.call('TIME')
local sec = tonumber(t[1])
local now = sec * 1000 + math.floor(tonumber(t[2]) / 1000)
local rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
if tpm > 0 then
  local used, oldest = 0, nil
  local h = redis.call('HGETALL', KEYS[2])
  for i = 1, #h, 2 do
    local s = tonumber(h[i])
    if s <= sec - 60 then
      redis.call('HDEL', KEYS[2], h[i])
    else
      used = used + tonumber(h[i + 1])
      if oldest == nil or s < oldest then oldest = s end
    end
  end
  if used >= tpm then return {0, (oldest + 60) * 1000 - now} end
end
if rpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 60000)
  if redis.call('ZCARD', KEYS[1]) >= rpm then
    local o = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return {0, tonumber(o[2]) + 60000 - now}
  end
  redis.call('ZADD', KEYS[1], now, ARGV[3])
end
return {1, 0}
`)

// ARGV: tokens. It drops the seconds older than a minute, as takeScript does: the hash carries
// no TTL, so a memory policy that evicts expiring keys never drops a tenant's count.
var tokensScript = redis.NewScript(`
local t = redis.call('TIME')
local sec = tonumber(t[1])
local h = redis.call('HKEYS', KEYS[2])
for i = 1, #h do
  if tonumber(h[i]) <= sec - 60 then redis.call('HDEL', KEYS[2], h[i]) end
end
redis.call('HINCRBY', KEYS[2], t[1], ARGV[1])
return 1
`)

// Take admits one call of tenant under rpm calls and tpm completion tokens per minute (0: no
// limit), or says how long to wait.
func (l *Limits) Take(ctx context.Context, tenant string, rpm, tpm int) (bool, time.Duration, error) {
	var res []any
	err := l.c.do(ctx, func(ctx context.Context, rdb *redis.Client) error {
		var err error
		res, err = takeScript.Run(ctx, rdb, limitKeys(tenant), rpm, tpm, newID()).Slice()
		return err
	})
	if err != nil {
		return false, 0, err
	}
	ok, _ := res[0].(int64)
	wait, _ := res[1].(int64)
	return ok == 1, time.Duration(wait) * time.Millisecond, nil
}

// AddTokens books a call's completion tokens against tenant.
func (l *Limits) AddTokens(ctx context.Context, tenant string, tokens int) error {
	return l.c.do(ctx, func(ctx context.Context, rdb *redis.Client) error {
		return tokensScript.Run(ctx, rdb, limitKeys(tenant), tokens).Err()
	})
}
