package cluster

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Responses keeps the Responses API's stored responses for every replica
// (responses.Store), so a conversation started on one replica continues on any: one string per
// response under eoc:resp:{tenant}:<id>, expiring TTL after its Put, and per tenant a sorted set
// eoc:resp:{tenant} of its ids by time of Put, which bounds a tenant's entries (the oldest go
// first) and expires with them. Every key carries a TTL, so Redis's memory policy may evict them
// as it evicts the cache's. It is safe for concurrent use.
type Responses struct {
	c *Client
	o ResponsesOptions
}

// ResponsesOptions bound the stored responses; zero fields take the defaults below.
type ResponsesOptions struct {
	// TTL is how long a response is kept after its Put (DefaultResponsesTTL).
	TTL time.Duration
	// MaxValue bounds one stored response's bytes (DefaultResponsesMaxValue): a larger Put is
	// refused, and a larger value read is taken as absent (not one this store wrote).
	MaxValue int
	// TenantEntries bounds one tenant's stored responses (DefaultResponsesTenantEntries).
	TenantEntries int
}

// Defaults of ResponsesOptions: those of the in-memory store (package responses).
const (
	DefaultResponsesTTL           = 24 * time.Hour
	DefaultResponsesMaxValue      = 4 << 20
	DefaultResponsesTenantEntries = 10000
)

// ErrResponseTooLarge is a Put of a value larger than ResponsesOptions.MaxValue.
var ErrResponseTooLarge = errors.New("stored response larger than the store keeps")

// Responses returns the shared store of Responses API responses.
func (c *Client) Responses(o ResponsesOptions) *Responses {
	if o.TTL <= 0 {
		o.TTL = DefaultResponsesTTL
	}
	if o.MaxValue <= 0 {
		o.MaxValue = DefaultResponsesMaxValue
	}
	if o.TenantEntries <= 0 {
		o.TenantEntries = DefaultResponsesTenantEntries
	}
	return &Responses{c: c, o: o}
}

// responseKeys are the keys of tenant's response id and of its index; the hash tag keeps a
// tenant's keys in one slot, as the script that trims the index deletes its values.
func responseKeys(tenant, id string) (val, index string) {
	index = "eoc:resp:{" + tenant + "}"
	return index + ":" + id, index
}

// KEYS: the value, the index. ARGV: value, ttl ms, max entries, id. Redis's clock orders the
// index; ids older than the TTL leave it, and past max entries the oldest go with their values.
var putResponseScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl, most = tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - ttl)
redis.call('ZADD', KEYS[2], now, ARGV[4])
local over = redis.call('ZCARD', KEYS[2]) - most
if over > 0 then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, over - 1)) do
    redis.call('DEL', KEYS[2] .. ':' .. id)
  end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, over - 1)
end
redis.call('PEXPIRE', KEYS[2], ttl)
return 1
`)

// Get returns tenant's response id. It reads at most MaxValue+1 bytes: a longer value is not one
// this store wrote, and counts as absent. While Redis is down it returns ErrDown.
func (s *Responses) Get(ctx context.Context, tenant, id string) ([]byte, bool, error) {
	key, _ := responseKeys(tenant, id)
	var b []byte
	err := s.c.do(ctx, func(ctx context.Context, rdb *redis.Client) error {
		var err error
		b, err = rdb.GetRange(ctx, key, 0, int64(s.o.MaxValue)).Bytes()
		return err
	})
	switch {
	case errors.Is(err, redis.Nil):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	case len(b) == 0: // GETRANGE of a missing key; no stored response is empty
		return nil, false, nil
	case len(b) > s.o.MaxValue:
		s.c.log.Warn().Int("limit", s.o.MaxValue).Msg("stored response larger than the limit: ignored")
		return nil, false, nil
	}
	return b, true, nil
}

// Put stores val as tenant's response id for the TTL.
func (s *Responses) Put(ctx context.Context, tenant, id string, val []byte) error {
	if len(val) > s.o.MaxValue {
		return ErrResponseTooLarge
	}
	key, index := responseKeys(tenant, id)
	return s.c.do(ctx, func(ctx context.Context, rdb *redis.Client) error {
		return putResponseScript.Run(ctx, rdb, []string{key, index}, val, s.o.TTL.Milliseconds(),
			strconv.Itoa(s.o.TenantEntries), id).Err()
	})
}

// Delete removes tenant's response id; found says whether there was one.
func (s *Responses) Delete(ctx context.Context, tenant, id string) (bool, error) {
	key, index := responseKeys(tenant, id)
	var n *redis.IntCmd
	err := s.c.do(ctx, func(ctx context.Context, rdb *redis.Client) error {
		_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			n = p.Del(ctx, key)
			p.ZRem(ctx, index, id)
			return nil
		})
		return err
	})
	if err != nil {
		return false, err
	}
	return n.Val() > 0, nil
}
