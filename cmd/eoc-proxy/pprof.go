package main

import (
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/rs/zerolog"
)

// servePprof serves net/http/pprof on addr, its own listener, and returns what closes it. It is
// only called when eoc.yaml sets debug.pprof: the public handler never carries these routes.
func servePprof(addr string, log zerolog.Logger) (func() error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: pprofMux(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn().Err(err).Msg("pprof listener stopped")
		}
	}()
	log.Warn().Str("listen", ln.Addr().String()).Msg("pprof is on (debug.pprof): profiles and heap contents are readable by whoever reaches this address")
	return srv.Close, nil
}

// pprofMux is net/http/pprof's routes on a mux of their own.
func pprofMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
