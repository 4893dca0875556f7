package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// KVStream shares kv learning through one Redis Stream, eoc:kv:learned (kv.Shared): each entry
// carries its publisher's instance id, so a process skips its own; the stream is capped at
// about maxLen entries (XADD MAXLEN ~), which bounds what a new replica replays at start.
type KVStream struct {
	c      *Client
	self   string // this process, unique per start
	maxLen int64
}

const kvStreamKey = "eoc:kv:learned"

// KVStream returns the shared learning stream, capped at about maxLen entries.
func (c *Client) KVStream(maxLen int) *KVStream {
	return &KVStream{c: c, self: newID(), maxLen: int64(maxLen)}
}

// Publish appends one entry.
func (k *KVStream) Publish(ctx context.Context, entry []byte) error {
	return k.c.do(ctx, func(ctx context.Context, rdb *redis.Client) error {
		return rdb.XAdd(ctx, &redis.XAddArgs{Stream: kvStreamKey, MaxLen: k.maxLen, Approx: true,
			Values: []any{"r", k.self, "e", entry}}).Err()
	})
}

// followBlock is how long one XREAD waits for new entries.
const followBlock = time.Second

// Follow replays the stream from its start, then follows it, calling apply for each entry
// another process published, until ctx ends. While Redis is down it waits and resumes after
// the last entry it saw.
func (k *KVStream) Follow(ctx context.Context, apply func(entry []byte)) {
	last := "0"
	for ctx.Err() == nil {
		if !k.c.Up() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(k.c.probe):
			}
			continue
		}
		rdb := k.c.rdb.Load()
		rctx, cancel := context.WithTimeout(ctx, followBlock+k.c.opTO)
		streams, err := rdb.XRead(rctx, &redis.XReadArgs{Streams: []string{kvStreamKey, last}, Count: 512, Block: followBlock}).Result()
		cancel()
		switch {
		case errors.Is(err, redis.Nil):
			continue // nothing new within the block
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			if isTimeout(err) {
				continue // a slow Redis is not down: the pings judge that
			}
			k.c.markDown(err)
			continue
		}
		for _, st := range streams {
			for _, m := range st.Messages {
				last = m.ID
				if r, _ := m.Values["r"].(string); r == k.self {
					continue
				}
				if e, ok := m.Values["e"].(string); ok {
					apply([]byte(e))
				}
			}
		}
	}
}
