// Command echo is the workload of the real-node tests: an HTTP server on
// :8080 (or $PORT) that answers every request with the cluster it runs in
// ($CLUSTER) and its pod's name, so a client can tell which backend
// answered. It is also the client: /fetch and /resolve run requests and
// lookups from inside its pod (its network, its DNS), for a test on the
// host to ask.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

func main() {
	cluster, pod := os.Getenv("CLUSTER"), os.Getenv("HOSTNAME")
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "cluster=%s pod=%s\n", cluster, pod)
	})
	// /ready is the readiness probe's: 200 until /ready?set=false, then 503
	// until /ready?set=true. The server keeps answering "/" either way, so
	// a test can take a backend out of its Service without stopping it.
	var notReady atomic.Bool
	http.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("set") {
		case "false":
			notReady.Store(true)
		case "true":
			notReady.Store(false)
		}
		if notReady.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	// /fetch?url=U&n=N GETs U N times, each on a new connection (so each
	// may reach another backend), and prints one line per answer: its
	// first line, or "error: ...".
	http.HandleFunc("/fetch", func(w http.ResponseWriter, r *http.Request) {
		url := r.URL.Query().Get("url")
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		if n <= 0 {
			n = 1
		}
		client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		for i := 0; i < n; i++ {
			resp, err := client.Get(url)
			if err != nil {
				fmt.Fprintf(w, "error: %v\n", err)
				continue
			}
			body, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				fmt.Fprintf(w, "error: %v\n", err)
				continue
			}
			fmt.Fprintln(w, strings.SplitN(strings.TrimSpace(string(body)), "\n", 2)[0])
		}
	})
	// /resolve?name=N prints the addresses N resolves to, one per line.
	http.HandleFunc("/resolve", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupHost(ctx, r.URL.Query().Get("name"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		fmt.Fprintln(w, strings.Join(addrs, "\n"))
	})
	if err := http.ListenAndServe(":"+port, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
