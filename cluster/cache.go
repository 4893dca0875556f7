package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cache is the exact cache's shared tier (cache.Remote): one Redis string per answer, under
// eoc:cache:<tenant>:<key>, expiring with the cache's TTL (DefaultCacheTTL when that is not
// positive): every entry expires, so Redis's memory policy (maxmemory with volatile-lru) evicts
// cache entries and never the budgets' and limits' keys, which carry no TTL.
type Cache struct{ c *Client }

// Cache returns the shared tier of the exact cache.
func (c *Client) Cache() *Cache { return &Cache{c: c} }

func cacheKey(tenant, key string) string { return "eoc:cache:" + tenant + ":" + key }

// Get returns the stored value, or false on a miss or while Redis is down.
func (s *Cache) Get(ctx context.Context, tenant, key string) ([]byte, bool) {
	var b []byte
	err := s.c.do(ctx, func(ctx context.Context, rdb *redis.Client) error {
		var err error
		b, err = rdb.Get(ctx, cacheKey(tenant, key)).Bytes()
		return err
	})
	if err != nil {
		if !errors.Is(err, redis.Nil) && !errors.Is(err, ErrDown) {
			s.c.log.Debug().Err(err).Msg("cache get")
		}
		return nil, false
	}
	return b, true
}

// DefaultCacheTTL bounds an entry stored with no positive TTL: an entry without one could not
// be evicted under volatile-lru.
const DefaultCacheTTL = time.Hour

// Set stores val for ttl (DefaultCacheTTL when ttl is not positive, never without an expiry);
// while Redis is down it does nothing.
func (s *Cache) Set(ctx context.Context, tenant, key string, val []byte, ttl time.Duration) {
	if ttl <= 0 {
		ttl = DefaultCacheTTL
	}
	err := s.c.do(ctx, func(ctx context.Context, rdb *redis.Client) error {
		return rdb.Set(ctx, cacheKey(tenant, key), val, ttl).Err()
	})
	if err != nil && !errors.Is(err, ErrDown) {
		s.c.log.Debug().Err(err).Msg("cache set")
	}
}
