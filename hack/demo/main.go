// Command demo runs endpoint-aggregator against three throw-away clusters
// (a hub and the members east and west, each a real etcd + kube-apiserver),
// shows what it wrote into the hub, prints one kubeconfig with the contexts
// hub, east and west and the `status`/`explain` commands to try with it, and
// keeps everything running until Ctrl-C. Run it with `make demo`, which
// builds the binaries first.
//
// Ctrl-C (SIGINT) or SIGTERM once the hub tables are printed is the normal
// end: it stops the daemon and the clusters, removes their files, and exits
// 0. Before that, or when cleaning up fails, it exits 1.
//
// With -check it is a smoke test instead: it exits 0 as soon as it has
// printed the hub tables and checked that each context of the merged
// kubeconfig reaches its cluster, and non-zero with its error otherwise (a timeout,
// the daemon exiting, a failed cleanup), stopping everything it started
// either way, and ends with one line starting "demo -check: ". `make
// demo-check` (hack/demo-check.sh) runs it many times in a row.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

func main() {
	d := &demo{}
	flag.StringVar(&d.binary, "binary", "bin/endpoint-aggregator", "path to the endpoint-aggregator binary")
	flag.DurationVar(&d.timeout, "timeout", 2*time.Minute, "how long to wait for the aggregated objects to appear in the hub")
	flag.BoolVar(&d.once, "once", false, "print the hub's state and stop, instead of waiting for Ctrl-C")
	flag.BoolVar(&d.check, "check", false, "smoke test: exit 0 once the hub tables are printed, non-zero on a timeout or any other error; "+
		"stops everything either way and ends with a line starting \"demo -check: \" (implies -once; instead of printing the hints, "+
		"checks that each context of the merged kubeconfig reaches its cluster)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "demo: unexpected arguments %q\n", flag.Args())
		flag.Usage()
		os.Exit(2)
	}

	giveBack := takeTerminal()
	defer giveBack()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	t0 := time.Now()
	err := d.runAndCleanup(ctx)
	if d.check {
		if err != nil {
			fmt.Printf("demo -check: FAIL after %s: %s\n", time.Since(t0).Round(100*time.Millisecond), firstLine(err.Error()))
		} else {
			fmt.Printf("demo -check: ok: printed the hub tables; %s in all\n", time.Since(t0).Round(100*time.Millisecond))
		}
	}
	if err != nil {
		giveBack()
		os.Exit(1)
	}
}

type demo struct {
	binary  string
	timeout time.Duration
	once    bool
	check   bool

	dir        string
	clusters   []*testenv.Cluster
	daemon     *exec.Cmd
	daemonLog  string
	metricsURL string
	daemonDone chan struct{}
	daemonErr  error // valid once daemonDone is closed
}

// runAndCleanup runs the demo and then stops what it started, also when run
// fails or panics. Its error is run's, else cleanup's.
func (d *demo) runAndCleanup(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			_ = d.cleanup()
			panic(r)
		}
	}()
	err = d.run(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo: %v\n", err)
		d.printDaemonLogTail()
	}
	if cerr := d.cleanup(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

func (d *demo) run(ctx context.Context) error {
	binary, err := filepath.Abs(d.binary)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(binary); err != nil || fi.IsDir() {
		return fmt.Errorf("endpoint-aggregator binary %s not found (build it with `make build`, or pass -binary)", binary)
	}
	assets, err := testenv.AssetsDir()
	if err != nil {
		return err
	}
	d.dir, err = os.MkdirTemp("", "endpoint-aggregator-demo-")
	if err != nil {
		return err
	}

	fmt.Println("Starting 3 clusters (hub, east, west), each a real etcd + kube-apiserver ...")
	t0 := time.Now()
	specs := []testenv.Spec{{Name: "hub", Options: testenv.Options{CRDs: true}}}
	for _, m := range members {
		specs = append(specs, testenv.Spec{Name: m.name, Options: testenv.Options{CRDs: true}})
	}
	d.clusters, err = testenv.StartAll(specs...)
	if err != nil {
		return err
	}
	fmt.Printf("Clusters up in %s.\n", time.Since(t0).Round(100*time.Millisecond))
	if err := ctx.Err(); err != nil {
		return errors.New("interrupted")
	}
	hub := d.clusters[0]

	kubeconfigs := map[string]string{}
	for _, c := range d.clusters {
		p := filepath.Join(d.dir, c.Name+".kubeconfig")
		if err := os.WriteFile(p, c.Kubeconfig, 0o600); err != nil {
			return err
		}
		kubeconfigs[c.Name] = p
	}

	// Hub: the daemon's namespace with one registration Secret per member,
	// and the application namespace the aggregated objects go to.
	for _, ns := range []string{daemonNamespace, appNamespace} {
		if _, err := hub.Client.CoreV1().Namespaces().Create(ctx, namespace(ns), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("hub: create namespace %s: %w", ns, err)
		}
	}
	for i, m := range members {
		s := registrationSecret(m.name, d.clusters[i+1].Kubeconfig)
		if _, err := hub.Client.CoreV1().Secrets(daemonNamespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("hub: create Secret %s: %w", s.Name, err)
		}
		if err := populateMember(ctx, d.clusters[i+1].Client, m); err != nil {
			return err
		}
	}
	fmt.Println("Registered members east and west; exported shop/cart from both and shop/db (headless) from east.")

	if err := d.startDaemon(ctx, binary, kubeconfigs["hub"]); err != nil {
		return err
	}

	// Quiet client for reading the hub: core/v1 Endpoints draws a
	// deprecation warning on every request.
	cfg := rest.CopyConfig(hub.Config)
	cfg.WarningHandler = rest.NoWarnings{}
	fmt.Printf("Waiting (up to %s) for the aggregated objects in the hub ...\n", d.timeout)
	st, err := d.waitForHub(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Printf("\n=== Hub, namespace %s ===\n", appNamespace)
	if err := printHub(os.Stdout, st); err != nil {
		return err
	}

	merged, err := mergeKubeconfigs(namedKubeconfigs(d.clusters))
	if err != nil {
		return err
	}
	mergedPath := filepath.Join(d.dir, "kubeconfig")
	if err := os.WriteFile(mergedPath, merged, 0o600); err != nil {
		return err
	}
	if d.check {
		fmt.Println()
		// The kubeconfig is about to go away: no hints, but every context
		// it offers must reach its cluster.
		return checkContexts(ctx, mergedPath, d.clusters)
	}
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	h := hints{kubeconfig: mergedPath, cli: cliPath(binary, cwd), daemonLog: d.daemonLog, metricsURL: d.metricsURL}
	h.kubectl, h.kubectlNote = findKubectl(assets)
	h.print(os.Stdout)

	if d.once {
		return nil
	}
	// From here on SIGINT or SIGTERM is the normal end: exit 0.
	fmt.Println("\nRunning. Press Ctrl-C to stop the daemon and the clusters.")
	select {
	case <-ctx.Done():
	case <-d.daemonDone:
		// A terminal's Ctrl-C also reaches the clusters' processes (they
		// share the demo's process group) and may stop the daemon's hub
		// before the demo sees the signal: that is the end asked for too.
		if ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
				return fmt.Errorf("endpoint-aggregator exited unexpectedly: %v", exitText(d.daemonErr))
			}
		}
	}
	fmt.Println()
	return nil
}

// namedKubeconfigs are the clusters' kubeconfigs, each under its cluster's
// name.
func namedKubeconfigs(clusters []*testenv.Cluster) []namedKubeconfig {
	out := make([]namedKubeconfig, 0, len(clusters))
	for _, c := range clusters {
		out = append(out, namedKubeconfig{name: c.Name, data: c.Kubeconfig})
	}
	return out
}

func (d *demo) startDaemon(ctx context.Context, binary, hubKubeconfig string) error {
	d.daemonLog = filepath.Join(d.dir, "endpoint-aggregator.log")
	logf, err := os.Create(d.daemonLog)
	if err != nil {
		return err
	}
	defer func() { _ = logf.Close() }() // the child keeps its own descriptor; nothing was written through this one
	// Metrics on a free loopback port rather than the default :8080, which
	// may be taken and would listen on every interface.
	metricsAddr, err := freeLoopbackAddr()
	if err != nil {
		return err
	}
	args := []string{"run", "--kubeconfig", hubKubeconfig, "--namespace", daemonNamespace, "--export-mode", "annotation",
		"--metrics-bind-address", metricsAddr}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	setOwnProcessGroup(cmd) // Ctrl-C reaches the demo only; it stops the daemon in order
	fmt.Printf("Starting %s %s\n  (output in %s)\n", filepath.Base(binary), strings.Join(args, " "), d.daemonLog)
	d.metricsURL = "http://" + metricsAddr + "/metrics"
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start endpoint-aggregator: %w", err)
	}
	d.daemon = cmd
	d.daemonDone = make(chan struct{})
	go func() {
		d.daemonErr = cmd.Wait()
		close(d.daemonDone)
	}()
	return ctx.Err()
}

// waitForHub polls the hub until every exported service has its
// ServiceImport and an EndpointSlice per source cluster, then waits for the
// objects to stop changing for a moment so the tables show a settled state.
func (d *demo) waitForHub(ctx context.Context, cfg *rest.Config) (hubState, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return hubState{}, err
	}
	mcs, err := mcsclient.NewForConfig(cfg)
	if err != nil {
		return hubState{}, err
	}
	const (
		interval = 500 * time.Millisecond
		settle   = 2 * time.Second  // unchanged for this long: done
		maxWait  = 15 * time.Second // ... or complete for this long: done anyway
	)
	deadline := time.Now().Add(d.timeout)
	var (
		missing              []string
		lastPrint, lastFP    string
		completeAt, stableAt time.Time
	)
	for {
		st, err := readHub(ctx, cs, mcs)
		if err != nil {
			missing = []string{err.Error()}
		} else {
			missing = missingObjects(st)
		}
		if len(missing) == 0 {
			now := time.Now()
			if completeAt.IsZero() {
				completeAt = now
			}
			if fp := fingerprint(st); fp != lastFP {
				lastFP, stableAt = fp, now
			}
			if now.Sub(stableAt) >= settle || now.Sub(completeAt) >= maxWait {
				return st, nil
			}
		} else if p := strings.Join(missing, ", "); p != lastPrint {
			fmt.Printf("  waiting for: %s\n", p)
			lastPrint = p
		}
		if time.Now().After(deadline) {
			return hubState{}, fmt.Errorf("timed out after %s waiting for the aggregated objects in the hub; missing: %s",
				d.timeout, strings.Join(missing, ", "))
		}
		select {
		case <-ctx.Done():
			return hubState{}, errors.New("interrupted")
		case <-d.daemonDone:
			return hubState{}, fmt.Errorf("endpoint-aggregator exited before the hub was populated: %v", exitText(d.daemonErr))
		case <-time.After(interval):
		}
	}
}

func readHub(ctx context.Context, cs kubernetes.Interface, mcs mcsclient.Interface) (hubState, error) {
	var st hubState
	imports, err := mcs.MulticlusterV1beta1().ServiceImports(appNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return st, fmt.Errorf("list ServiceImports: %w", err)
	}
	services, err := cs.CoreV1().Services(appNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return st, fmt.Errorf("list Services: %w", err)
	}
	slices, err := cs.DiscoveryV1().EndpointSlices(appNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return st, fmt.Errorf("list EndpointSlices: %w", err)
	}
	endpoints, err := cs.CoreV1().Endpoints(appNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return st, fmt.Errorf("list Endpoints: %w", err)
	}
	return hubState{imports: imports.Items, services: services.Items, slices: slices.Items, endpoints: endpoints.Items}, nil
}

// missingObjects lists, for each exported service, the ServiceImport (with
// its source clusters in status) and the per-cluster EndpointSlices not yet
// in st.
func missingObjects(st hubState) []string {
	want := map[string][]string{} // service -> source clusters
	for _, m := range members {
		want["cart"] = append(want["cart"], m.name)
		if len(m.db) > 0 {
			want["db"] = append(want["db"], m.name)
		}
	}
	haveSlice := map[string]bool{}
	for _, s := range st.slices {
		haveSlice[s.Labels[mcsServiceLabel]+"/"+s.Labels[mcsClusterLabel]] = true
	}
	var missing []string
	for _, svc := range sortedKeys(want) {
		clusters := map[string]bool{}
		found := false
		for _, si := range st.imports {
			if si.Name == svc {
				found = true
				for _, c := range si.Status.Clusters {
					clusters[c.Cluster] = true
				}
			}
		}
		if !found {
			missing = append(missing, "ServiceImport "+svc)
		}
		for _, c := range want[svc] {
			if found && !clusters[c] {
				missing = append(missing, fmt.Sprintf("ServiceImport %s status cluster %s", svc, c))
			}
			if !haveSlice[svc+"/"+c] {
				missing = append(missing, fmt.Sprintf("EndpointSlice %s from %s", svc, c))
			}
		}
	}
	return missing
}

func fingerprint(st hubState) string {
	var parts []string
	for _, o := range st.imports {
		parts = append(parts, "si/"+o.Name+"@"+o.ResourceVersion)
	}
	for _, o := range st.services {
		parts = append(parts, "svc/"+o.Name+"@"+o.ResourceVersion)
	}
	for _, o := range st.slices {
		parts = append(parts, "eps/"+o.Name+"@"+o.ResourceVersion)
	}
	for _, o := range st.endpoints {
		parts = append(parts, "ep/"+o.Name+"@"+o.ResourceVersion)
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// findKubectl returns the kubectl to suggest: the one `make tools` builds
// next to kube-apiserver, else one on $PATH, else "kubectl" with a note on
// how to build it (`make demo` builds only what the demo runs).
func findKubectl(assets string) (path, note string) {
	p := filepath.Join(assets, "kubectl")
	if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
		return p, ""
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p, ""
	}
	return "kubectl", " (no kubectl found: `make kubectl` builds one into " + assets + ")"
}

// cleanup stops whatever run started, in reverse order: the daemon (SIGTERM,
// then SIGKILL after 15s), the clusters, the temporary directory. It returns
// what went wrong, having printed it; it is safe to call more than once.
func (d *demo) cleanup() error {
	var errs []error
	if d.daemon != nil {
		select {
		case <-d.daemonDone:
		default:
			fmt.Println("Stopping endpoint-aggregator ...")
			_ = d.daemon.Process.Signal(syscall.SIGTERM)
			select {
			case <-d.daemonDone:
			case <-time.After(15 * time.Second):
				fmt.Fprintln(os.Stderr, "demo: endpoint-aggregator did not stop within 15s after SIGTERM; killing it")
				_ = d.daemon.Process.Kill()
				<-d.daemonDone
			}
			fmt.Printf("endpoint-aggregator stopped (%s).\n", exitText(d.daemonErr))
		}
		d.daemon = nil
	}
	if len(d.clusters) > 0 {
		fmt.Println("Stopping the clusters ...")
		if err := testenv.StopAll(d.clusters...); err != nil {
			fmt.Fprintf(os.Stderr, "demo: %v\n", err)
			errs = append(errs, err)
		}
		d.clusters = nil
	}
	if d.dir != "" {
		if err := os.RemoveAll(d.dir); err != nil {
			fmt.Fprintf(os.Stderr, "demo: %v\n", err)
			errs = append(errs, err)
		}
		d.dir = ""
	}
	fmt.Println("Done.")
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	return nil
}

// printDaemonLogTail shows the end of the daemon's log on failure, before
// cleanup removes it.
func (d *demo) printDaemonLogTail() {
	if d.daemonLog == "" {
		return
	}
	data, err := os.ReadFile(d.daemonLog)
	if err != nil || len(bytes.TrimSpace(data)) == 0 {
		return
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	fmt.Fprintf(os.Stderr, "--- last lines of %s ---\n%s\n---\n", d.daemonLog, strings.Join(lines, "\n"))
}

// freeLoopbackAddr returns 127.0.0.1:PORT for a port that was free a moment
// ago.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
