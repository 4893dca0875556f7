package main

import (
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/cluster"
	"github.com/eoc-proxy/eoc-proxy/config"
	"github.com/eoc-proxy/eoc-proxy/proxy"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect/responses"
)

// openCluster connects to the shared Redis when eoc.yaml names one (nil otherwise). An
// unreachable Redis is not an error: the replica starts on local state and shares once it
// answers.
func openCluster(cfg *config.Config, reg prometheus.Registerer, log zerolog.Logger, a *app) (*cluster.Client, error) {
	if cfg.Redis.URL == "" {
		return nil, nil
	}
	c, err := cluster.Open(cluster.Options{URL: string(cfg.Redis.URL), Password: string(cfg.Redis.Password), ReplicaID: replicaID(cfg), Logger: log, Registry: reg,
		OpTimeout: cfg.Redis.OpTimeout.D()})
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, c.Close)
	return c, nil
}

// replicaID is this replica's name in ledger records and file names: replica_id, else the
// hostname when replicas share a Redis; "" for a lone proxy, whose ledger stays as it was.
func replicaID(cfg *config.Config) string {
	if cfg.ReplicaID != "" || cfg.Redis.URL == "" {
		return cfg.ReplicaID
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "replica"
	}
	return h
}

// shareEdge gives the edge the shared budgets and rate limits when replicas share a Redis.
func shareEdge(o *proxy.Options, c *cluster.Client) {
	if c == nil {
		return
	}
	o.SharedBudgets = c.Budgets()
	o.SharedLimits = c.Limits()
}

// responsesDialect is the Responses API with its stored responses: in memory, and in Redis too
// when the replicas share one (so any replica continues a conversation).
func responsesDialect(c *cluster.Client) *responses.Dialect {
	var store responses.Store = responses.NewMemory(responses.MemoryOptions{})
	if c != nil {
		store = responses.Layered{Local: store, Shared: c.Responses(cluster.ResponsesOptions{})}
	}
	return responses.New(responses.Options{Store: store})
}
