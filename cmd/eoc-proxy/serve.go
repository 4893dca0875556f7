package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/eoc-proxy/eoc-proxy/backends"
	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
	"github.com/eoc-proxy/eoc-proxy/config"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/ledger"
	"github.com/eoc-proxy/eoc-proxy/meter"
	"github.com/eoc-proxy/eoc-proxy/proxy"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect/completions"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect/messages"
	"github.com/eoc-proxy/eoc-proxy/telemetry"
)

func runServe(args []string, _ io.Writer) (err error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	path := configFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	// The collector gets gcHeadroom to grow into on a small heap, unless GOGC is set.
	if t := tuneGC(); t != nil {
		defer t.stop()
	}
	// Log lines are written off the request path (lineWriter); the deferred Close writes the last.
	logOut := newLineWriter(os.Stderr)
	defer func() { _ = logOut.Close() }()
	log := newLogger(cfg.LogLevel, logOut)
	app, err := build(cfg, filesFor(*path), log)
	if err != nil {
		return err
	}
	// A closer's failure (the ledger's final fsync, say) fails serve: it exits non-zero.
	defer func() { err = errors.Join(err, app.shutdown()) }()

	if cfg.Debug.Pprof != "" {
		stop, err := servePprof(cfg.Debug.Pprof, component(log, "pprof"))
		if err != nil {
			return fmt.Errorf("debug.pprof: %w", err)
		}
		defer func() { _ = stop() }()
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           app.handler,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    proxy.HardMaxHeaderBytes,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          stdlog.New(component(log, "http"), "", 0),
	}
	// Signals are caught before the first request can arrive.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log = component(log, "serve")
	log.Info().Str("listen", ln.Addr().String()).Str("version", buildVersion()).Msg("eoc-proxy serving")

	for {
		select {
		case err := <-errc:
			return err
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				app.reload()
				continue
			}
			log.Info().Str("signal", sig.String()).Dur("deadline", cfg.Limits.ShutdownTimeout.D()).Msg("shutting down: draining in-flight requests")
			ctx, cancel := context.WithTimeout(context.Background(), cfg.Limits.ShutdownTimeout.D())
			err := srv.Shutdown(ctx)
			cancel()
			if err != nil {
				log.Warn().Err(err).Msg("shutdown deadline passed; closing the rest")
				_ = srv.Close()
			}
			if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			log.Info().Msg("stopped")
			return nil
		}
	}
}

// newLogger is the root logger: JSON lines on w at level (info when it does not parse). It
// changes none of zerolog's package settings; each package gets it named by component.
func newLogger(level string, w io.Writer) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		lvl = zerolog.InfoLevel
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

// app is everything serve wires together.
type app struct {
	handler  http.Handler
	registry *prometheus.Registry
	closers  []func() error
	reloads  []func() // on SIGHUP, each logging whether it worked
	log      zerolog.Logger
}

// reload runs the stages' reloads, on SIGHUP.
func (a *app) reload() {
	if len(a.reloads) == 0 {
		a.log.Info().Msg("nothing to reload on SIGHUP")
	}
	for _, r := range a.reloads {
		r()
	}
}

// shutdown runs the closers, last opened first, once, and returns their errors joined.
func (a *app) shutdown() error {
	var errs []error
	for i := len(a.closers) - 1; i >= 0; i-- {
		if err := a.closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	a.closers = nil
	if err := errors.Join(errs...); err != nil {
		a.log.Error().Err(err).Msg("closing")
		return fmt.Errorf("closing: %w", err)
	}
	return nil
}

// close is shutdown for the paths that have an error of their own to return; shutdown logs
// what fails.
func (a *app) close() { _ = a.shutdown() }

// build wires config into the cascade and the HTTP edge. files is where the stages read the
// files eoc.yaml names.
func build(cfg *config.Config, files fs.FS, log zerolog.Logger) (*app, error) {
	a := &app{log: component(log, "serve")}
	routes := make([]routing.Route, 0, len(cfg.Backends))
	for _, b := range cfg.Backends {
		be, err := backends.New(backends.Options{Name: b.Name, Type: b.Type, URL: b.URL, APIKey: string(b.APIKey),
			Timeout: b.Timeout.D(), MaxDuration: b.MaxDuration.D()})
		if err != nil {
			return nil, fmt.Errorf("backend %s: %w", b.Name, err)
		}
		routes = append(routes, routing.Route{Name: b.Name, Type: b.Type, Patterns: b.Models, Backend: be})
	}
	router, err := routing.New(routes, routingOptions(cfg.Routing))
	if err != nil {
		return nil, err
	}
	m, err := meter.New(meterOptions(cfg, component(log, "meter")))
	if err != nil {
		return nil, fmt.Errorf("meter: %w", err)
	}
	a.closers = append(a.closers, m.Close)
	live := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "eoc_meter_counter_live",
		Help: "1 when a hardware energy counter is live, 0 when it is not (the log says why)."}, []string{"counter"})
	for _, cs := range m.Counters() {
		v := 0.0
		if cs.Live {
			v = 1
		}
		live.WithLabelValues(cs.Name).Set(v)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), live)
	a.registry = reg

	// One running figure per model of what a neural call costs here: the neural stage feeds it,
	// and kv seeds and graph answers report it as what they saved.
	costs := energy.NewTracker(energy.DefaultTrackerWeight)
	shared, err := openCluster(cfg, reg, component(log, "redis"), a)
	if err != nil {
		a.close()
		return nil, err
	}
	deps := &stageDeps{cfg: cfg, costs: costs, router: router, meter: m, files: files, log: log, prom: reg, app: a, shared: shared}
	stages := make([]cascade.Stage, 0, len(cfg.Cascade.Stages))
	for _, name := range cfg.Cascade.Stages {
		newStage, ok := stageFactories[name]
		if !ok {
			a.close()
			return nil, fmt.Errorf("stage %q is not registered", name)
		}
		st, err := newStage(deps)
		if err != nil {
			a.close()
			return nil, fmt.Errorf("%s stage: %w", name, err)
		}
		stages = append(stages, st)
	}
	c := cascade.New(router, stages, cascade.Options{StageWatts: cfg.Meter.StageWattsPerCore, Logger: component(log, "cascade")})
	var keys []proxy.APIKey
	for _, k := range cfg.Auth.Keys {
		key := proxy.APIKey{ID: k.ID, Key: string(k.Key)}
		if k.Budget != nil {
			key.Budget = &proxy.Budget{Joules: k.Budget.Joules, Per: k.Budget.Per}
		}
		if k.Limits != nil {
			key.Limits = &proxy.Rate{RPM: k.Limits.RPM, TPM: k.Limits.TPM}
		}
		keys = append(keys, key)
	}
	record, err := openLedger(cfg, component(log, "ledger"), a)
	if err != nil {
		a.close()
		return nil, err
	}
	tracing, meters, err := startTelemetry(cfg, a)
	if err != nil {
		a.close()
		return nil, err
	}
	opts := proxy.Options{
		Cascade:        c,
		Logger:         component(log, "proxy"),
		MaxBodyBytes:   cfg.Limits.MaxBodyBytes,
		RequestTimeout: cfg.Limits.RequestTimeout.D(),
		Keys:           keys,
		Registry:       reg,
		MetricsNeedKey: cfg.Auth.MetricsNeedKey,
		Record:         record,
		AdminKeyIDs:    cfg.Auth.AdminKeys,
		Counters:       counterStates(m),
		Tracing:        tracing,
		Meters:         meters,
	}
	shareEdge(&opts, shared)
	opts.Dialects = map[string]dialect.Dialect{
		"/v1/responses":   responsesDialect(shared),
		"/v1/messages":    messages.New(),
		"/v1/completions": completions.New(),
	}
	edge := proxy.New(opts)
	a.handler = edge
	// Closed first (closers run last opened first): the calls still settling are recorded
	// before the ledger and the meter close.
	a.closers = append(a.closers, edge.Close)
	return a, nil
}

// openLedger opens the receipts ledger, if one is configured, and returns the edge's Record hook.
func openLedger(cfg *config.Config, log zerolog.Logger, a *app) (func(proxy.Call) error, error) {
	if cfg.Ledger.Path == "" {
		return nil, nil
	}
	replica := replicaID(cfg)
	l, err := ledger.Open(ledger.Options{Path: ledger.ReplicaPath(cfg.Ledger.Path, replica), Fsync: cfg.Ledger.Fsync, HMACKey: []byte(cfg.Ledger.HMACKey),
		MaxBytes: cfg.Ledger.MaxBytes, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	a.closers = append(a.closers, l.Close)
	return func(c proxy.Call) error {
		_, err := l.Append(ledger.Record{Time: c.Time, RequestID: c.RequestID, KeyID: c.KeyID, Key: c.Key, Model: c.Model,
			Stage: c.Stage, Backend: c.Backend, Status: c.Status, Figure: c.Energy,
			Disconnected: c.Disconnected, Attempts: ledgerAttempts(c.Attempts), Receipt: c.Receipt, Replica: replica,
			Settles: c.Settles})
		return err
	}, nil
}

func ledgerAttempts(as []cascade.BackendAttempt) []ledger.Attempt {
	if len(as) == 0 {
		return nil
	}
	out := make([]ledger.Attempt, len(as))
	for i, a := range as {
		out[i] = ledger.Attempt{Backend: a.Backend, Outcome: a.Outcome, Status: a.Status,
			Joules: energy.RoundNano(a.Energy.Joules), Grade: a.Energy.Grade}
	}
	return out
}

// routingOptions maps the routing section onto the router's options.
func routingOptions(r config.Routing) routing.Options {
	o := routing.Options{EjectAfter: r.EjectAfter, Cooldown: r.Cooldown.D(), Explore: r.Explore}
	for _, g := range r.Groups {
		o.Policies = append(o.Policies, routing.Policy{Patterns: g.Models, Strategy: routing.Strategy(g.Strategy)})
	}
	return o
}

func meterOptions(cfg *config.Config, log zerolog.Logger) meter.Options {
	o := meter.Options{
		RAPL:            cfg.Meter.RAPL.Enabled,
		NVML:            cfg.Meter.NVML.Enabled,
		SysfsRoot:       cfg.Meter.RAPL.SysfsRoot,
		CPUWattsPerCore: cfg.Meter.CPUWattsPerCore,
		GPUWatts:        cfg.Meter.GPUWatts,
		Logger:          log,
		SettleInline:    cfg.Meter.NVML.SettleInline,
	}
	for _, tm := range cfg.Meter.TokenModels {
		o.TokenModels = append(o.TokenModels, meter.TokenModel{Patterns: tm.Models, JPerPrompt: tm.JoulesPerPromptToken, JPerCompletion: tm.JoulesPerCompletionToken})
	}
	for _, b := range cfg.Backends {
		o.Backends = append(o.Backends, meter.BackendInfo{Name: b.Name, URL: b.URL, PIDFile: b.Process.PIDFile, Cgroup: b.Process.Cgroup, JoulesPerToken: b.JoulesPerToken})
	}
	if e := cfg.Cascade.KV.Embedder; embedderTypes[e.Type].needsURL {
		o.Backends = append(o.Backends, meter.BackendInfo{Name: kvEmbedderName, URL: e.URL})
	}
	return o
}

// startTelemetry starts the OTLP trace and metric exporters when telemetry.otlp_endpoint is set
// (nil, and no exporter, otherwise); shutdown flushes what each holds, for at most 5 s.
func startTelemetry(cfg *config.Config, a *app) (trace.TracerProvider, metric.MeterProvider, error) {
	o := telemetry.Options{Endpoint: cfg.Telemetry.OTLPEndpoint, Version: buildVersion()}
	tp, shutdownTraces, err := telemetry.Setup(o)
	if err != nil || tp == nil {
		return nil, nil, err
	}
	mp, shutdownMetrics, err := telemetry.SetupMetrics(o)
	if err != nil {
		_ = shutdownTraces(context.Background())
		return nil, nil, err
	}
	for _, shutdown := range []func(context.Context) error{shutdownTraces, shutdownMetrics} {
		a.closers = append(a.closers, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return shutdown(ctx)
		})
	}
	return tp, mp, nil
}

// counterStates reports the meter's counters to the page as serve found them at start, the same
// states eoc_meter_counter_live shows (the edge does not import the meter).
func counterStates(m *meter.Meter) func() []proxy.Counter {
	return func() []proxy.Counter {
		cs := m.Counters()
		out := make([]proxy.Counter, len(cs))
		for i, c := range cs {
			out[i] = proxy.Counter{Name: c.Name, Live: c.Live, Reason: c.Reason}
		}
		return out
	}
}
