package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cache is the exact cache's shared tier (cache.Remote): one Redis string per answer, under
// eoc:cache:<tenant>:<key>, expiring with the cache's TTL. Its size is bounded by Redis's own
// memory policy (maxmemory with allkeys-lru, say).
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

// Set stores val for ttl; while Redis is down it does nothing.
func (s *Cache) Set(ctx context.Context, tenant, key string, val []byte, ttl time.Duration) {
	err := s.c.do(ctx, func(ctx context.Context, rdb *redis.Client) error {
		return rdb.Set(ctx, cacheKey(tenant, key), val, ttl).Err()
	})
	if err != nil && !errors.Is(err, ErrDown) {
		s.c.log.Debug().Err(err).Msg("cache set")
	}
}
