package app

import (
	"net/http"
	"net/http/pprof"
)

// registerPprof adds the net/http/pprof handlers to the metrics mux. Profiles
// expose internals and heap contents: only --profiling turns them on.
func registerPprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
