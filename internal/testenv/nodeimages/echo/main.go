// Command echo is the workload of the real-node tests: an HTTP server on
// :8080 (or $PORT) that answers every request with the cluster it runs in
// ($CLUSTER) and its pod's name, so a client can tell which backend
// answered.
package main

import (
	"fmt"
	"net/http"
	"os"
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
	if err := http.ListenAndServe(":"+port, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
