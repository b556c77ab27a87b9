package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

const (
	// startTimeout bounds each control-plane process start. Three clusters
	// starting at once on a 2-core machine need far more than envtest's 20s
	// default.
	startTimeout = 2 * time.Minute
	stopTimeout  = 30 * time.Second

	// adminUser is the identity of every cluster's kubeconfig.
	adminUser = "admin"
)

// Options configures one cluster.
type Options struct {
	// CRDs installs the mcs-api ServiceExport and ServiceImport CRDs
	// (multicluster.x-k8s.io, v1alpha1 and v1beta1) and waits until they are
	// served.
	CRDs bool
	// Audit makes the API server write an audit log (Cluster.AuditLogPath)
	// of every write: Metadata level, and Request level for Leases, so
	// that a test can tell from the server's own record who wrote what,
	// and when.
	Audit bool
	// Node, when set, gives the cluster one real node (see node.go):
	// kubelet, containerd, kube-proxy, and kube-scheduler and
	// kube-controller-manager, with a pod network routed to the other
	// clusters' nodes. It needs root.
	Node *NodeOptions
}

// NodeOptions configures a cluster's node.
type NodeOptions struct {
	// ClusterDNSAtHost makes the host side of the node's link (Node.HostIP)
	// the nameserver the kubelet gives pods: start CoreDNS there with
	// StartCoreDNSAt. Otherwise pods get an empty resolv.conf, so they ask
	// nobody.
	ClusterDNSAtHost bool
	// Images are image tarballs (docker-archive or OCI) imported into the
	// node's containerd besides the test images (pause, echo).
	Images []string
	// MCSConformance also imports the images the MCS conformance suites'
	// pods name (busybox, nicolaka/netshoot and alpine/socat stand-ins),
	// built here.
	MCSConformance bool
	// Family is the cluster's IP family plan: IPv4 (the default), IPv6
	// only, or dual-stack with IPv4 primary. It sets the node's link and
	// pod network, the API server's address and Service range, the
	// kubelet's node IPs and kube-proxy's cluster CIDRs (see node.go).
	Family Family
}

// auditPolicy records every write once, when it completed: Leases and
// EndpointSlices with their request body (who holds them, which endpoints
// they carry), the rest by metadata.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Request
  verbs: ["create", "update", "patch", "delete"]
  resources: [{group: "coordination.k8s.io", resources: ["leases"]}, {group: "discovery.k8s.io", resources: ["endpointslices"]}]
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

var cleanStaleOnce sync.Once

// Cluster is one running control plane: etcd plus kube-apiserver.
//
// Config and Client talk to it as a member of system:masters. Do not modify
// Config in place; use rest.CopyConfig.
type Cluster struct {
	// Name is the cluster name given to Start. It names the kubeconfig's
	// cluster and context.
	Name string
	// Config is the admin client configuration (parsed from Kubeconfig).
	Config *rest.Config
	// Client is a typed clientset built from Config.
	Client kubernetes.Interface
	// Kubeconfig holds a self-contained kubeconfig for the admin user:
	// server https://127.0.0.1:PORT, inline CA data, inline client
	// certificate and key, current context named Name.
	Kubeconfig []byte
	// KubeconfigPath is Kubeconfig written to a file inside Dir.
	KubeconfigPath string
	// Dir is the cluster's temporary directory: etcd data, apiserver
	// certificates, kube-apiserver.log, etcd.log and the kubeconfig. Stop
	// removes it.
	Dir string
	// Node is the cluster's node, with Options.Node; nil otherwise.
	Node *Node
	// AuditLogPath is the API server's audit log, with Options.Audit.
	AuditLogPath string

	nodeOpts NodeOptions
	env      *envtest.Environment
	logs     []*os.File
	mu       sync.Mutex
	apiDown  bool
	frozen   bool
	stopped  bool
}

var setLoggerOnce sync.Once

// setControllerRuntimeLogger gives controller-runtime (which envtest logs
// through) a logger, so it does not print its "log.SetLogger(...) was never
// called" warning with a stack trace. Only errors are shown.
func setControllerRuntimeLogger() {
	setLoggerOnce.Do(func() {
		ctrllog.SetLogger(funcr.New(func(prefix, args string) {
			fmt.Fprintln(os.Stderr, "testenv:", prefix, args)
		}, funcr.Options{Verbosity: 0}))
	})
}

// Start starts a new cluster named name (a DNS label). It blocks until the
// apiserver is healthy, the default namespace exists and, with opts.CRDs,
// the CRDs are served. On error nothing is left running.
// reapOnce: orphans are looked for once per process, before the first
// cluster starts.
var reapOnce sync.Once

func Start(name string, opts Options) (_ *Cluster, retErr error) {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return nil, fmt.Errorf("testenv: invalid cluster name %q: %s", name, strings.Join(errs, "; "))
	}
	assets, err := AssetsDir()
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	setControllerRuntimeLogger()
	// A run killed before its cleanup leaves its control planes running,
	// adopted by init: stop them before starting more.
	reapOnce.Do(func() {
		for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
			killOrphans(filepath.Join(assets, b))
		}
	})

	dir, err := os.MkdirTemp("", "endpoint-aggregator-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	c := &Cluster{Name: name, Dir: dir}
	defer func() {
		if retErr != nil {
			if c.Node != nil {
				c.Node.stop()
			}
			if c.env != nil {
				_ = c.env.Stop()
			}
			if c.Node != nil {
				c.Node.teardown()
			}
			c.closeLogs()
			_ = os.RemoveAll(dir)
		}
	}()

	// Explicit directories: envtest then neither generates fresh
	// certificates nor deletes the data when the apiserver is restarted
	// (StopAPIServer/StartAPIServer), and Stop removes everything at once.
	etcdDir := filepath.Join(dir, "etcd")
	certDir := filepath.Join(dir, "apiserver")
	for _, d := range []string{etcdDir, certDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, fmt.Errorf("testenv: %w", err)
		}
	}
	apiLog, err := c.createLog("kube-apiserver.log")
	if err != nil {
		return nil, err
	}
	etcdLog, err := c.createLog("etcd.log")
	if err != nil {
		return nil, err
	}

	useExisting := false
	env := &envtest.Environment{
		ControlPlane: envtest.ControlPlane{
			APIServer: &envtest.APIServer{
				// Set explicitly so that KUBEBUILDER_ASSETS or
				// TEST_ASSET_* in the environment cannot swap binaries.
				Path:    filepath.Join(assets, "kube-apiserver"),
				CertDir: certDir,
				Out:     apiLog,
				Err:     apiLog,
			},
			Etcd: &envtest.Etcd{
				Path:    filepath.Join(assets, "etcd"),
				DataDir: etcdDir,
				Out:     etcdLog,
				Err:     etcdLog,
			},
			KubectlPath: filepath.Join(assets, "kubectl"),
		},
		BinaryAssetsDirectory:    assets,
		UseExistingCluster:       &useExisting,
		ControlPlaneStartTimeout: startTimeout,
		ControlPlaneStopTimeout:  stopTimeout,
	}
	if opts.CRDs {
		crds, err := mcsCRDs()
		if err != nil {
			return nil, fmt.Errorf("testenv: %w", err)
		}
		env.CRDInstallOptions = envtest.CRDInstallOptions{CRDs: crds}
	}
	// Close open watches 1 s into a shutdown instead of waiting for them,
	// so StopAPIServer takes seconds even while the daemon is watching.
	env.ControlPlane.APIServer.Configure().Set("shutdown-watch-termination-grace-period", "1s")
	c.env = env
	if opts.Audit {
		policy := filepath.Join(dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
			return nil, fmt.Errorf("testenv: %w", err)
		}
		c.AuditLogPath = filepath.Join(dir, "audit.log")
		env.ControlPlane.APIServer.Configure().Set("audit-policy-file", policy).Set("audit-log-path", c.AuditLogPath).Set("audit-log-maxsize", "0")
	}
	if opts.Node != nil {
		if err := c.prepareNode(*opts.Node, certDir); err != nil {
			return nil, err
		}
	}

	if _, err := env.Start(); err != nil {
		return nil, fmt.Errorf("testenv: start cluster %q: %w%s", name, err, c.logTails())
	}

	user, err := env.AddUser(envtest.User{Name: adminUser, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("testenv: cluster %q: add admin user: %w", name, err)
	}
	c.Kubeconfig, err = kubeconfigFor(name, user.Config())
	if err != nil {
		return nil, fmt.Errorf("testenv: cluster %q: %w", name, err)
	}
	c.KubeconfigPath = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(c.KubeconfigPath, c.Kubeconfig, 0o600); err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}

	// Build the clients from the kubeconfig bytes, so that every test
	// exercises the exact credentials the daemon will be given.
	c.Config, err = clientcmd.RESTConfigFromKubeConfig(c.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("testenv: cluster %q: parse own kubeconfig: %w", name, err)
	}
	// Test clients should never be throttled client-side.
	c.Config.QPS, c.Config.Burst = 1000, 2000
	// The deprecation warning on every core/v1 Endpoints read is noise here.
	c.Config.WarningHandler = rest.NoWarnings{}
	c.Client, err = kubernetes.NewForConfig(c.Config)
	if err != nil {
		return nil, fmt.Errorf("testenv: cluster %q: %w", name, err)
	}
	if c.Node != nil {
		if err := c.startNode(assets); err != nil {
			return nil, fmt.Errorf("testenv: cluster %q: node: %w", name, err)
		}
	}
	return c, nil
}

// prepareNode creates the node's network before the API server starts, so
// that the API server can bind and advertise the host side of the node's
// link, with a serving certificate that also covers the kubernetes Service.
func (c *Cluster) prepareNode(o NodeOptions, certDir string) error {
	if os.Geteuid() != 0 {
		return errors.New("testenv: a cluster with a node needs root")
	}
	if err := checkNodeDeps(); err != nil {
		return err
	}
	if err := checkFamily(o.Family); err != nil {
		return err
	}
	cleanStaleOnce.Do(CleanStaleNodes)
	n := &Node{dir: filepath.Join(c.Dir, "node")}
	if err := os.Mkdir(n.dir, 0o700); err != nil {
		return err
	}
	nn, st, err := setupNodeNetwork(c.Dir, o.Family)
	if err != nil {
		return err
	}
	n.net, n.state, n.Family = nn, st, nn.family
	n.IPs = nn.each(func(f familyNet) string { return f.nodeIP.String() })
	n.HostIPs = nn.each(func(f familyNet) string { return f.hostIP.String() })
	n.PodCIDRs = nn.each(func(f familyNet) string { return f.podCIDR })
	n.ServiceCIDRs = nn.each(func(f familyNet) string { return f.serviceCIDR })
	n.IP, n.HostIP, n.PodCIDR = n.IPs[0], n.HostIPs[0], n.PodCIDRs[0]
	n.Socket = filepath.Join(n.dir, "containerd.sock")
	c.Node, c.nodeOpts = n, o
	var certIPs []net.IP
	for _, f := range nn.nets {
		certIPs = append(certIPs, f.hostIP, f.kubernetesIP)
	}
	ca, err := writeServingCerts(certDir, certIPs...)
	if err != nil {
		return err
	}
	// envtest picks 127.0.0.1 unless given both address and port.
	ln, err := net.Listen("tcp", net.JoinHostPort(n.HostIP, "0"))
	if err != nil {
		return err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	api := c.env.ControlPlane.APIServer
	api.SecureServing.Address, api.SecureServing.Port = n.HostIP, strconv.Itoa(port)
	api.SecureServing.CA = ca
	api.Configure().Set("advertise-address", n.HostIP)
	// The kubernetes Service takes the first address of the primary range,
	// which must be of the advertised address's family.
	api.Configure().Set("service-cluster-ip-range", strings.Join(n.ServiceCIDRs, ","))
	// Logs and exec reach the kubelet by its InternalIP: resolving the
	// node's name would ask the machine's resolver.
	api.Configure().Set("kubelet-preferred-address-types", "InternalIP")
	// Pods get their ServiceAccount token (envtest turns the plugin off,
	// as nothing creates ServiceAccounts without a controller manager).
	api.Configure().Disable("disable-admission-plugins")
	return nil
}

// kubeconfigFor renders cfg (host, CA and client certificate, all inline) as
// a kubeconfig whose cluster and context are called name.
func kubeconfigFor(name string, cfg *rest.Config) ([]byte, error) {
	if len(cfg.CAData) == 0 || len(cfg.CertData) == 0 || len(cfg.KeyData) == 0 {
		return nil, errors.New("admin user has no inline CA or client certificate data")
	}
	authInfo := name + "-" + adminUser // unique, so kubeconfigs can be merged
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{
		Server:                   strings.TrimSuffix(cfg.Host, "/"),
		CertificateAuthorityData: cfg.CAData,
	}
	kc.AuthInfos[authInfo] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
	}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: authInfo}
	kc.CurrentContext = name
	return clientcmd.Write(*kc)
}

// Host returns the apiserver URL, https://127.0.0.1:PORT.
func (c *Cluster) Host() string { return c.Config.Host }

// StopAPIServer stops the cluster's kube-apiserver (SIGTERM, then SIGKILL
// after 30s) and leaves etcd running. Clients get connection errors until
// StartAPIServer.
func (c *Cluster) StopAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return fmt.Errorf("testenv: cluster %q is stopped", c.Name)
	}
	if c.apiDown {
		return nil
	}
	c.apiDown = true
	c.thaw()
	if err := c.env.ControlPlane.APIServer.Stop(); err != nil {
		return fmt.Errorf("testenv: cluster %q: stop kube-apiserver: %w", c.Name, err)
	}
	return nil
}

// StartAPIServer starts the kube-apiserver again after StopAPIServer, with
// the same etcd (so the same data), the same port, serving certificate and
// client CA, so Config, Client, Kubeconfig and existing clients keep
// working. It blocks until /healthz answers.
func (c *Cluster) StartAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return fmt.Errorf("testenv: cluster %q is stopped", c.Name)
	}
	if !c.apiDown {
		return nil
	}
	if err := c.env.ControlPlane.APIServer.Start(); err != nil {
		return fmt.Errorf("testenv: cluster %q: restart kube-apiserver: %w%s", c.Name, err, c.logTails())
	}
	c.apiDown = false
	return nil
}

// Stop stops kube-apiserver and etcd, waits for both processes to exit and
// removes Dir. It is safe to call more than once.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	if !c.apiDown {
		c.thaw()
	}
	if c.Node != nil {
		c.Node.stop()
	}
	err := c.env.Stop()
	if c.Node != nil {
		c.Node.teardown()
	}
	c.closeLogs()
	if rmErr := os.RemoveAll(c.Dir); rmErr != nil && err == nil {
		err = rmErr
	}
	if err != nil {
		return fmt.Errorf("testenv: stop cluster %q: %w", c.Name, err)
	}
	return nil
}

// thaw resumes a frozen kube-apiserver so that it can handle SIGTERM.
func (c *Cluster) thaw() {
	if !c.frozen {
		return
	}
	if pid, err := c.apiServerPID(); err == nil {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	c.frozen = false
}

func (c *Cluster) createLog(name string) (*os.File, error) {
	f, err := os.Create(filepath.Join(c.Dir, name))
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	c.logs = append(c.logs, f)
	return f, nil
}

func (c *Cluster) closeLogs() {
	for _, f := range c.logs {
		_ = f.Close()
	}
	c.logs = nil
}

// logTails returns the last lines of the process logs, for error messages.
func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, name := range []string{"etcd.log", "kube-apiserver.log"} {
		s, err := TailFile(filepath.Join(c.Dir, name), 15)
		if err != nil || s == "" {
			continue
		}
		fmt.Fprintf(&b, "\n--- last lines of %s ---\n%s", name, s)
	}
	return b.String()
}
