// Package cluster is the Redis plumbing that lets several eoc-proxy replicas share the exact
// cache, kv learning, joule budgets and rate limits.
//
// It is the only package that imports the Redis client: the cascade and the edge declare the
// small interfaces they need (cache.Remote, kv.Shared, proxy.SharedBudgets, proxy.SharedLimits)
// and this package implements them.
//
// Redis going away degrades, never fails: every operation returns ErrDown (or the cache a miss)
// at once while Redis is unreachable, the callers fall back to their local state, the outage is
// logged once and eoc_redis_up reads 0; a background ping notices when Redis is back. A Redis
// that hangs rather than goes away is the same outage: an operation is tried once, within its
// own deadline (Options.OpTimeout), and one that gets no answer in it marks Redis down, so a
// hung Redis holds a call no longer than that deadline.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/rs/zerolog"
)

// ErrDown is returned while Redis is unreachable: the caller uses its local state.
var ErrDown = errors.New("redis is unreachable")

// Options configure the connection.
type Options struct {
	// URL is redis://[user:password@]host:port/db, or rediss:// for TLS.
	URL string
	// Password, when set, overrides the URL's.
	Password string
	// ReplicaID names this replica in what it publishes, so it can skip its own entries.
	ReplicaID string
	Logger    zerolog.Logger
	// Registry, when set, gets the eoc_redis_up gauge.
	Registry prometheus.Registerer
	// OpTimeout bounds one operation (DefaultOpTimeout when not positive): past it, Redis
	// counts as down until a ping answers.
	OpTimeout time.Duration
	// Probe is how often a down Redis is pinged, and an up one checked (default 500ms).
	Probe time.Duration
}

// DefaultOpTimeout bounds one operation when Options.OpTimeout is not set: Redis on a LAN
// answers in well under a millisecond, so one that takes half a second is hung or overloaded.
const DefaultOpTimeout = 500 * time.Millisecond

// Client is one replica's connection to the shared store. It is safe for concurrent use.
type Client struct {
	rdb     atomic.Pointer[redis.Client]
	ropts   *redis.Options
	replica string
	log     zerolog.Logger
	opTO    time.Duration
	probe   time.Duration
	up      atomic.Bool
	gauge   prometheus.Gauge
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	backFns []func() // run when Redis comes back (after an outage)
	mu      sync.Mutex
	// orphans are reservations whose admission got no answer: Redis may still run it once it
	// answers again, so each is released then (releaseOrphans).
	orphans   []orphan
	releasing bool // a releaseOrphans goroutine is running
}

// Open parses the URL and starts watching Redis. An unreachable Redis is not an error: the
// client starts down and comes up when Redis answers.
func Open(o Options) (*Client, error) {
	ro, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, errors.New("redis url: does not parse as redis:// or rediss://") // the URL may hold a password
	}
	if o.Password != "" {
		ro.Password = o.Password
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	if o.Probe <= 0 {
		o.Probe = 500 * time.Millisecond
	}
	ro.DialTimeout = o.OpTimeout
	ro.ReadTimeout = o.OpTimeout
	ro.WriteTimeout = o.OpTimeout
	ro.PoolTimeout = o.OpTimeout
	// An operation also ends at its caller's deadline (the cache's lookup waits 500 ms, not
	// OpTimeout): go-redis ignores context deadlines on the socket unless told otherwise.
	ro.ContextTimeoutEnabled = true
	ro.MaxRetries = 1 // one retry on a fresh connection after a restart, within the same deadline
	ro.DialerRetries = 1
	ro.DisableIdentity = true
	ro.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	// The client's own log lines (each failed dial) would repeat an outage on every call: this
	// package logs it once, and the client's lines go to debug.
	redis.SetLogger(debugLog{o.Logger})
	c := &Client{
		ropts: ro, replica: o.ReplicaID, log: o.Logger, opTO: o.OpTimeout, probe: o.Probe,
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "eoc_redis_up",
			Help: "Whether the shared Redis answers (1); 0 while this replica runs on local state."}),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	c.rdb.Store(redis.NewClient(ro))
	if o.Registry != nil {
		if err := o.Registry.Register(c.gauge); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.OpTimeout)
	err = c.rdb.Load().Ping(ctx).Err()
	cancel()
	if err != nil {
		c.logDown(err)
	} else {
		c.up.Store(true)
		c.gauge.Set(1)
	}
	go c.watch()
	return c, nil
}

// Replica is this replica's id.
func (c *Client) Replica() string { return c.replica }

// Up reports whether Redis answered the last operation.
func (c *Client) Up() bool { return c.up.Load() }

// OnBack registers f to run (in its own goroutine) each time Redis comes back after an outage.
func (c *Client) OnBack(f func()) {
	c.mu.Lock()
	c.backFns = append(c.backFns, f)
	c.mu.Unlock()
}

// Close stops the watcher and closes the connections.
func (c *Client) Close() error {
	c.once.Do(func() { close(c.stop) })
	<-c.done
	return c.rdb.Load().Close()
}

func (c *Client) watch() {
	defer close(c.done)
	t := time.NewTicker(c.probe)
	defer t.Stop()
	// The pings have a connection of their own, so a busy pool cannot make Redis look down.
	po := *c.ropts
	po.PoolSize, po.MinIdleConns, po.MaxRetries = 1, 0, -1
	ping := redis.NewClient(&po)
	defer func() { _ = ping.Close() }()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.opTO)
		err := ping.Ping(ctx).Err()
		cancel()
		if err != nil {
			// A ping that gets no answer within an operation's deadline is an outage, as an
			// operation's would be: a hung Redis is noticed within one deadline.
			c.markDown(err)
			continue
		}
		c.markUp()
	}
}

// isTimeout tells a slow answer (a deadline, a busy pool) from a refused or broken connection.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrPoolTimeout) || errors.As(err, &ne) && ne.Timeout()
}

// markDown notes an outage: logged once, when Redis goes from up to down.
func (c *Client) markDown(err error) {
	if c.up.CompareAndSwap(true, false) {
		c.logDown(err)
	}
}

func (c *Client) logDown(err error) {
	c.gauge.Set(0)
	c.log.Warn().Err(err).Msg("redis unreachable: cache, budgets and limits are local to this replica until it is back")
}

func (c *Client) markUp() {
	if !c.up.CompareAndSwap(false, true) {
		return
	}
	// The pool's connections died with the old server: start a fresh pool, and close the old
	// one once the calls that may still hold it are done.
	old := c.rdb.Swap(redis.NewClient(c.ropts))
	time.AfterFunc(10*time.Second, func() { _ = old.Close() })
	c.gauge.Set(1)
	c.log.Info().Msg("redis is back: sharing resumes")
	c.mu.Lock()
	fns := append([]func(){}, c.backFns...)
	c.mu.Unlock()
	for _, f := range fns {
		go f()
	}
	c.kickOrphans()
}

// errOpDeadline is the cause of an operation's own deadline, told apart from its caller's.
var errOpDeadline = errors.New("redis operation deadline")

// do runs one operation, once, within the op timeout, unless Redis is down. A connection
// failure or an operation that gets no answer within its own deadline marks Redis down; a reply
// error (a script's), or a caller that went away or whose shorter deadline passed, does not.
// No operation is retried past its deadline: a call waits for Redis no longer than that.
func (c *Client) do(ctx context.Context, op func(ctx context.Context, rdb *redis.Client) error) error {
	if !c.up.Load() {
		return ErrDown
	}
	opCtx, cancel := context.WithTimeoutCause(ctx, c.opTO, errOpDeadline)
	defer cancel()
	err := op(opCtx, c.rdb.Load())
	if err == nil || errors.Is(err, redis.Nil) {
		return err
	}
	var re redis.Error
	if errors.As(err, &re) {
		return err // Redis answered, with an error
	}
	if ctx.Err() != nil {
		return err // the caller went away, or its own deadline passed first
	}
	c.markDown(err)
	return fmt.Errorf("%w: %w", ErrDown, err)
}

// newID names one reservation or published entry: random, unique across replicas.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// debugLog takes the Redis client's log lines at debug level.
type debugLog struct{ log zerolog.Logger }

func (d debugLog) Printf(_ context.Context, format string, v ...any) {
	d.log.Debug().Msgf(format, v...)
}
