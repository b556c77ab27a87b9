// Package testenv starts throw-away Kubernetes control planes (a real etcd
// plus a real kube-apiserver per cluster) for the end-to-end tests and the
// demo.
//
// Each [Cluster] is independent: its own etcd and kube-apiserver on free
// loopback ports, its own temporary directory (etcd data, serving
// certificates, process logs, kubeconfig) and its own admin identity. A
// cluster started with [Options].Node also gets one real node (see node.go:
// kubelet, containerd, kube-proxy, kube-scheduler, kube-controller-manager,
// a pod network routed to the other clusters'; it needs root), in the IP
// family [NodeOptions].Family picks: IPv4 (the default), IPv6 only, or
// dual-stack with IPv4 primary ([Families] lists them; IPv6 addresses are
// unique local ones). The family sets the node's link and pod network, the
// API server's address and Service range (10.0.0.0/24, fd00:10:96::/112 or
// both), the kubelet's node IPs and kube-proxy's cluster CIDRs. Otherwise
// there is no kube-controller-manager, scheduler or kubelet: objects such as
// EndpointSlices are written directly by the test, and nothing garbage
// collects or finalizes namespaces. The apiserver runs with its default
// admission plugins except ServiceAccount (envtest disables it, as nothing
// creates the default ServiceAccount; it only matters for Pods), RBAC
// authorization, service CIDR 10.0.0.0/24 and etcd without fsync.
//
// The binaries are the ones `make tools` builds into the cache directory (see
// [AssetsDir]); nothing is downloaded at run time.
//
// Typical use from a test:
//
//	hub := testenv.StartT(t, "hub", testenv.Options{CRDs: true})
//	_, err := hub.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
//
// [StartAll] and [StartAllT] start several clusters concurrently (three take
// about as long as one on two cores). [Cluster.StopAPIServer] and
// [Cluster.StartAPIServer] take the apiserver down and back up on the same
// address with the same data and credentials, for fault tests.
//
// and from a program:
//
//	c, err := testenv.Start("east", testenv.Options{})
//	if err != nil { ... }
//	defer c.Stop()
//
// The control planes run in their own process group (envtest does that), so a
// Ctrl-C in a terminal does not reach them: always call [Cluster.Stop]. A
// process that is killed outright (SIGKILL, or a panicking test binary) leaves
// them running.
package testenv
