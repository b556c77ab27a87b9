// Package e2e holds end-to-end tests: real kube-apiserver and etcd processes
// for a hub and two members (internal/testenv), the daemon running in the
// test process against them, and assertions read back from the hub's API.
package e2e
