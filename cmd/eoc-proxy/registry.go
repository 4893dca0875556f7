package main

import (
	"fmt"
	"io/fs"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/backends"
	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/cache"
	"github.com/eoc-proxy/eoc-proxy/cascade/graph"
	"github.com/eoc-proxy/eoc-proxy/cascade/kv"
	"github.com/eoc-proxy/eoc-proxy/cascade/neural"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
	"github.com/eoc-proxy/eoc-proxy/cluster"
	"github.com/eoc-proxy/eoc-proxy/config"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/ledger"
	"github.com/eoc-proxy/eoc-proxy/meter"
	"github.com/eoc-proxy/eoc-proxy/proxy"
)

// stageDeps is what a stage factory may use: the config and what build made before the stages.
type stageDeps struct {
	cfg    *config.Config
	router *routing.Router
	meter  *meter.Meter
	costs  *energy.Tracker // the neural stage feeds it; kv seeds and graph answers read it
	files  fs.FS
	log    zerolog.Logger // the root logger; each factory names its component
	prom   *prometheus.Registry
	app    *app            // for closers and SIGHUP reloads
	shared *cluster.Client // the Redis replicas share; nil without one
}

// stageFactory builds the stage eoc.yaml lists under its name.
type stageFactory func(d *stageDeps) (cascade.Stage, error)

// embedderType is one cascade.kv.embedder.type.
type embedderType struct {
	needsURL bool // it calls a server
	// build makes the embedder; one on a model server is metered by m (nil: priced by tokens,
	// for the offline kv tools).
	build func(e config.Embedder, m *meter.Meter) (kv.Embedder, error)
}

// What eoc.yaml can name, registered the way backends registers its types (a map by name, a
// duplicate panics): stageFactories by cascade.stages name, with stageOrder the order of
// registration, which is the walk when eoc.yaml lists no stages (the cheap stages first, the
// one that answers everything last); embedderTypes by cascade.kv.embedder.type.
var (
	stageFactories = map[string]stageFactory{}
	stageOrder     []string
	embedderTypes  = map[string]embedderType{}
)

func registerStage(name string, f stageFactory) {
	if _, dup := stageFactories[name]; dup {
		panic("stage " + name + " registered twice")
	}
	stageFactories[name] = f
	stageOrder = append(stageOrder, name)
}

func registerEmbedder(typ string, e embedderType) {
	if _, dup := embedderTypes[typ]; dup {
		panic("embedder type " + typ + " registered twice")
	}
	embedderTypes[typ] = e
}

func init() {
	registerStage("cache", newCacheStage)
	registerStage("kv", newKVStage)
	registerStage("graph", newGraphStage)
	registerStage("neural", newNeuralStage)

	registerEmbedder(defaultEmbedder, embedderType{build: func(config.Embedder, *meter.Meter) (kv.Embedder, error) { return kv.Builtin{}, nil }})
	// Every backend type embeds (backends' Embed): the kv stage's embedder is such a backend.
	for _, typ := range backends.Types() {
		registerEmbedder(typ, embedderType{needsURL: true, build: backendEmbedder})
	}
}

// kvEmbedderName is the internal backend that serves the kv stage's embeddings, in the meter
// and in errors.
const kvEmbedderName = "kv-embedder"

// kvEmbedderTimeout bounds one embeddings call of the kv stage (the stage bounds its own waits
// more tightly while serving).
const kvEmbedderTimeout = 60 * time.Second

// backendEmbedder serves the kv stage's embeddings from a model server: a backend of e.Type
// named kv-embedder, every call metered like a chat call. The store keeps the embedder's id
// (the type, ":" and the model) in its collection names.
func backendEmbedder(e config.Embedder, m *meter.Meter) (kv.Embedder, error) {
	if e.Model == "" {
		return nil, fmt.Errorf("%s embedder needs a model", e.Type)
	}
	be, err := backends.New(backends.Options{Name: kvEmbedderName, Type: e.Type, URL: e.URL, APIKey: string(e.APIKey), Timeout: kvEmbedderTimeout})
	if err != nil {
		return nil, err
	}
	return neural.NewEmbedder(kvEmbedderName, e.Type+":"+e.Model, e.Model, be, m)
}

// defaultEmbedder is the embedder type when eoc.yaml names none: it needs no model.
const defaultEmbedder = "builtin"

// registry is what config validates eoc.yaml against: the names the factories here and in
// backends know, and the defaults their packages own. Backends register their own types
// (backends.Types).
func registry() config.Registry {
	emb := make(map[string]bool, len(embedderTypes))
	for name, e := range embedderTypes {
		emb[name] = e.needsURL
	}
	return config.Registry{
		Stages:       stageOrder,
		LastStage:    stageOrder[len(stageOrder)-1],
		BackendTypes: backends.Types(),
		Strategies:   routing.Strategies(),
		Switches:     meter.Switches(),
		Embedders:    emb,
		Defaults:     fillOwnerDefaults,
	}
}

// fillOwnerDefaults fills the fields eoc.yaml left empty with the defaults of the packages that
// own them, so `config check` shows what will run and no default is written twice. The rule: a
// package that reads a setting owns its default (an exported Default constant it applies to a
// zero value); config leaves the field zero and this copies the owner's value in. config fills
// only the defaults of settings no package defaults (config.fillDefaults).
func fillOwnerDefaults(c *config.Config) {
	orDefault(&c.Limits.MaxBodyBytes, proxy.DefaultMaxBodyBytes)
	cc := &c.Cascade.Cache
	orDefault(&cc.MaxBytes, cache.DefaultMaxBytes)
	orDefault(&cc.MaxEntryBytes, cache.DefaultMaxEntryBytes)
	r := &c.Routing
	orDefault(&r.EjectAfter, routing.DefaultEjectAfter)
	orDefault(&r.Cooldown, config.Duration(routing.DefaultCooldown))
	orDefault(&r.Explore, routing.DefaultExplore)
	k, kd := &c.Cascade.KV, kv.DefaultOptions()
	orDefault(&k.Embedder.Type, defaultEmbedder)
	orDefault(&k.Threshold, kd.Threshold)
	orDefault(&k.MaxEntries, kd.MaxEntries)
	orDefault(&k.MaxTotalEntries, max(kd.MaxTotalEntries, k.MaxEntries))
	orDefault(&k.MaxCollections, kd.MaxCollections)
	orDefault(&k.LearnQueue, kd.LearnQueue)
	orDefault(&k.MaxBytes, kd.MaxBytes)
	orDefault(&k.MaxEntryBytes, kd.MaxEntryBytes)
	if k.MaxSimilarTemperature == nil {
		k.MaxSimilarTemperature = kd.MaxSimilarTemperature
	}
	m := &c.Meter
	orDefault(&m.RAPL.Enabled, meter.DefaultSwitch)
	orDefault(&m.RAPL.SysfsRoot, meter.DefaultSysfsRoot)
	orDefault(&m.NVML.Enabled, meter.DefaultSwitch)
	orDefault(&m.CPUWattsPerCore, meter.DefaultCPUWattsPerCore)
	orDefault(&m.GPUWatts, meter.DefaultGPUWatts)
	// The meter prices in-process stages at its CPU price unless told otherwise; the cascade
	// needs the figure too, so it is resolved here.
	orDefault(&m.StageWattsPerCore, m.CPUWattsPerCore)
	orDefault(&c.Ledger.Fsync, ledger.FsyncEvery)
	orDefault(&c.Redis.OpTimeout, config.Duration(cluster.DefaultOpTimeout))
}

func orDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// component names a package's log lines by a field rather than a message prefix.
func component(log zerolog.Logger, name string) zerolog.Logger {
	return log.With().Str("component", name).Logger()
}

func newCacheStage(d *stageDeps) (cascade.Stage, error) {
	c := d.cfg.Cascade.Cache
	bounds := []cache.Option{cache.MaxBytes(c.MaxBytes), cache.MaxEntryBytes(c.MaxEntryBytes)}
	cs := cache.New(c.MaxEntries, c.TTL.D(), bounds...)
	if d.shared != nil {
		cs = cache.NewShared(c.MaxEntries, c.TTL.D(), d.shared.Cache(), bounds...)
	}
	d.prom.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eoc_cache_entries", Help: "Answers in the exact-match cache."},
		func() float64 { return float64(cs.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eoc_cache_bytes",
			Help: "Bytes of the answers and vectors in the exact-match cache's in-process LRU (bounded by cascade.cache.max_bytes)."},
			func() float64 { return float64(cs.Stats().Bytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "eoc_cache_too_large_total",
			Help: "Answers and vector sets served but not cached for being over cascade.cache.max_entry_bytes."},
			func() float64 { return float64(cs.Stats().TooLarge) }))
	return cs, nil
}

func newNeuralStage(d *stageDeps) (cascade.Stage, error) {
	return neural.New(d.router, d.meter, neural.WithObserver(d.costs), neural.WithLogger(component(d.log, "neural"))), nil
}

func newKVStage(d *stageDeps) (cascade.Stage, error) {
	o, err := kvOptions(d.cfg, d.meter, d.files, component(d.log, "kv"))
	if err != nil {
		return nil, err
	}
	o.Estimator = d.costs
	st, err := kv.New(o)
	if err != nil {
		return nil, err
	}
	d.app.closers = append(d.app.closers, st.Close)
	if d.shared != nil {
		// Replicas share what they learn; the stream keeps about max_entries of it for a new
		// replica to replay.
		st.Share(d.shared.KVStream(d.cfg.Cascade.KV.MaxEntries))
	}
	d.prom.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eoc_kv_entries", Help: "Learned entries in the kv stage."},
		func() float64 { return float64(st.Stats().Entries) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eoc_kv_bytes",
			Help: "Bytes of the kv stage's learned entries (bounded by cascade.kv.max_bytes)."},
			func() float64 { return float64(st.Stats().Bytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "eoc_kv_too_large_total",
			Help: "Answers served but not learned by the kv stage for being over cascade.kv.max_entry_bytes."},
			func() float64 { return float64(st.Stats().TooLarge) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "eoc_kv_learn_joules_total",
			Help: "Joules the kv stage's embedder spent learning answers in the background: metered, billed to no request."},
			func() float64 { return st.Stats().LearnJoules }))
	return st, nil
}

// kvOptions turns the kv section into the stage's Options, building its embedder (metered by m;
// nil for the offline tools).
func kvOptions(cfg *config.Config, m *meter.Meter, files fs.FS, log zerolog.Logger) (kv.Options, error) {
	c := cfg.Cascade.KV
	et, ok := embedderTypes[c.Embedder.Type]
	if !ok {
		return kv.Options{}, fmt.Errorf("embedder type %q is not registered", c.Embedder.Type)
	}
	if et.needsURL && slices.ContainsFunc(cfg.Backends, func(b config.Backend) bool { return b.Name == kvEmbedderName }) {
		return kv.Options{}, fmt.Errorf("backend name %q is reserved for the kv stage's embedder", kvEmbedderName)
	}
	emb, err := et.build(c.Embedder, m)
	if err != nil {
		return kv.Options{}, err
	}
	return kv.Options{
		Embedder:              emb,
		Threshold:             c.Threshold,
		SeedFiles:             c.SeedFiles,
		Files:                 files,
		DataDir:               c.DataDir,
		MaxEntries:            c.MaxEntries,
		MaxTotalEntries:       c.MaxTotalEntries,
		MaxCollections:        c.MaxCollections,
		MaxBytes:              c.MaxBytes,
		MaxEntryBytes:         c.MaxEntryBytes,
		MaxSimilarTemperature: c.MaxSimilarTemperature,
		LearnQueue:            c.LearnQueue,
		Logger:                log,
	}, nil
}

func newGraphStage(d *stageDeps) (cascade.Stage, error) {
	st, err := graph.New(graph.Options{Files: d.cfg.Cascade.Graph.Files, FS: d.files, Estimator: d.costs})
	if err != nil {
		return nil, err
	}
	log := component(d.log, "graph")
	d.app.reloads = append(d.app.reloads, func() {
		if err := st.Reload(); err != nil {
			log.Error().Err(err).Msg("SIGHUP reload failed; still serving the previous graph")
			return
		}
		log.Info().Int("triples", st.Len()).Msg("reloaded on SIGHUP")
	})
	return st, nil
}
