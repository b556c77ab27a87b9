package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
)

// The flood (-flood) replaces the benchmark's phases with issue item
// "Bounded memory per member": one member, the flooder, serves ten times
// the daemon's import bounds in Services and endpoints, none of them
// exported, while the simulated members go on exporting and changing. The
// flooder is a kube-apiserver and etcd of its own: the simulated members
// share one apiserver and all see its Services, so a flood there would
// flood every one of them.
//
// The daemon runs with small bounds, so that the flood fits a small
// machine: import bounds floodImportServices and floodImportEndpoints, read
// bounds floodReadFactor times those (as the defaults are). It measures,
// in order: a bounded daemon before the flood and while the flood is
// written and held; the bounded daemon restarted against the flood; and,
// with -flood-unbounded, a daemon with read bounds 0 started against it,
// whose extra memory is what holding the whole flood costs.
type floodConfig struct {
	on        bool
	unbounded bool
}

const (
	floodImportServices  = 1000  // --max-member-services
	floodImportEndpoints = 10000 // --max-member-endpoints
	floodReadFactor      = 4     // the read bounds are this many times the import bounds
	floodFactor          = 10    // the flooder serves this many times the import bounds
	floodServices        = floodFactor * floodImportServices
	floodEndpoints       = floodFactor * floodImportEndpoints
	floodSlices          = floodEndpoints / memberSliceSize

	floodCluster   = "flooder"
	floodNamespace = "flood"
	// floodExported is the flooder's one exported Service, in the hub
	// before the flood, and kept there as last seen while it is not read.
	floodExported          = "flood-exported"
	floodExportedEndpoints = 10
	// floodWait bounds the waits for the daemon to see the flood.
	floodWait = 3 * time.Minute
)

func (f *floodConfig) addFlags(fs *flag.FlagSet) {
	fs.BoolVar(&f.on, "flood", false, fmt.Sprintf("measure bounded memory per member instead of the benchmark: one more member, a kube-apiserver of its own, serves %d Services and %d endpoints, none exported (10x the daemon's import bounds, set to %d and %d); -changes timed changes of the other members before, during and after it",
		floodServices, floodEndpoints, floodImportServices, floodImportEndpoints))
	fs.BoolVar(&f.unbounded, "flood-unbounded", true, "flood: also start a daemon with read bounds 0 (no bound) against the flood, for comparison")
}

// floodMemory is the daemon's memory at one point, in MiB.
type floodMemory struct {
	RSS  float64 `json:"rssMiB"`       // median of 5 scrapes of process_resident_memory_bytes
	Heap float64 `json:"heapInuseMiB"` // median of go_memstats_heap_inuse_bytes
	// Live is the heap forced collections found live (collectedLiveHeap):
	// what the daemon holds, without the garbage awaiting collection.
	Live float64 `json:"liveHeapMiB"`
	Peak float64 `json:"peakMiB"` // VmHWM: the process's highest RSS so far
}

// floodPhase is one daemon process facing the flood.
type floodPhase struct {
	Name string   `json:"name"`
	Args []string `json:"args"` // the bounds flags
	// Before is its memory before the flood, After with the flood held.
	Before *floodMemory `json:"before,omitempty"`
	After  floodMemory  `json:"after"`
	// MaxSampledRSS is the highest VmRSS read every half second from the
	// flood's start to the After sample.
	MaxSampledRSS float64 `json:"maxSampledRSSMiB,omitempty"`
	// Idle, Flooding and Held are the other members' changes before the
	// flood, while it was written, and once written.
	Idle     *latencyStats `json:"idle,omitempty"`
	Flooding *latencyStats `json:"flooding,omitempty"`
	Held     *latencyStats `json:"held,omitempty"`
	Errors   []string      `json:"errors,omitempty"`
	// OverBoundsAfter is when the flooder first showed reason over_bounds,
	// in seconds since the flood's start (or the process's); -1: never.
	OverBoundsAfter float64 `json:"overBoundsAfterSeconds"`
	// ReadyAfter is when /readyz first answered 200, in seconds since the
	// process started; -1: not within the phase.
	ReadyAfter float64 `json:"readyAfterSeconds"`
	// FlooderReasons are the flooder's reasons in the metric at the end.
	FlooderReasons []string `json:"flooderReasons"`
	// ExportInHub is how many endpoints of the flooder's exported Service
	// the hub held at the end.
	ExportInHub int  `json:"flooderExportEndpointsInHub"`
	Up          bool `json:"stayedUp"`
}

// floodResult is what a flood run measured; it is also the JSON output.
type floodResult struct {
	Command   string        `json:"command"`
	StartedAt time.Time     `json:"startedAt"`
	Seconds   float64       `json:"seconds"`
	Machine   machine       `json:"machine"`
	Members   int           `json:"members"`
	Services  int           `json:"servicesPerMember"`
	Endpoints int           `json:"endpointsPerService"`
	Changes   int           `json:"changes"`
	WriteSecs float64       `json:"floodWriteSeconds"`
	Phases    []*floodPhase `json:"phases"`
}

// floodMain runs the flood and returns the exit code.
func floodMain(c *config) int {
	if c.replicas > 0 || c.profileDir != "" || c.doc != "" || c.soak.duration > 0 {
		fmt.Fprintln(os.Stderr, "bench: -replicas, -profile-dir, -doc and -soak are not the flood's")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, err := runFlood(ctx, c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "\nbench: %v\n", err)
		return 1
	}
	fmt.Println()
	res.writeText(os.Stdout)
	if c.jsonOut != "" {
		data, err := json.MarshalIndent(res, "", "  ")
		if err == nil {
			err = os.WriteFile(c.jsonOut, append(data, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 1
		}
		fmt.Printf("\nJSON written to %s\n", c.jsonOut)
	}
	return 0
}

// floodCommand is the command line of this run, for the report.
func floodCommand(c *config) string {
	s := fmt.Sprintf("go run ./hack/bench -binary bin/endpoint-aggregator -flood -members %d -services %d -endpoints %d -changes %d",
		c.members, c.services, c.endpoints, c.changes)
	if !c.flood.unbounded {
		s += " -flood-unbounded=false"
	}
	return s + extraFlags(append(slices.Clone(c.daemonFlags), c.daemonEnv...))
}

// floodBounds are the daemon's bounds flags; read bounds 0 when unbounded.
func floodBounds(unbounded bool) []string {
	rs, re := floodReadFactor*floodImportServices, floodReadFactor*floodImportEndpoints
	if unbounded {
		rs, re = 0, 0
	}
	return []string{
		"--max-member-services=" + strconv.Itoa(floodImportServices),
		"--max-member-endpoints=" + strconv.Itoa(floodImportEndpoints),
		"--max-member-read-services=" + strconv.Itoa(rs),
		"--max-member-read-endpoints=" + strconv.Itoa(re),
	}
}

func runFlood(ctx context.Context, c *config) (_ *floodResult, retErr error) {
	res := &floodResult{Command: floodCommand(c), StartedAt: time.Now().UTC().Truncate(time.Second), Machine: describeMachine(),
		Members: c.members, Services: c.services, Endpoints: c.endpoints, Changes: c.changes}
	tmp, doneLogs, err := logDir("flood")
	if err != nil {
		return nil, err
	}
	defer func() { doneLogs(c.keepLogs || retErr != nil) }()

	cs, stopClusters, err := startClusters("hub", "member", "flooder")
	if err != nil {
		return nil, err
	}
	defer stopClusters()
	hub, member, flooder := cs[0], cs[1], cs[2]
	f := newFleet(c.members, c.services, c.endpoints)
	logf("member: populating %d members x %d services x %d endpoints", c.members, c.services, c.endpoints)
	if err := f.populate(ctx, member.Client); err != nil {
		return nil, err
	}
	proxy, err := startMemberProxy(member.Config, f.members)
	if err != nil {
		return nil, err
	}
	defer proxy.close()
	if err := createNamespace(ctx, hub.Client, appNamespace); err != nil {
		return nil, err
	}
	if err := warmUp(ctx, hub); err != nil {
		return nil, err
	}
	if err := registerMembers(ctx, hub.Client, f, proxy); err != nil {
		return nil, fmt.Errorf("hub: registering members: %w", err)
	}
	if err := setUpFlooder(ctx, hub.Client, flooder); err != nil {
		return nil, err
	}
	ch := newChanger(f, member.Client)
	tr, _, err := startTracker(ctx, "flood", f, c, hub)
	if err != nil {
		return nil, err
	}
	defer tr.close()

	logPath := filepath.Join(tmp, "endpoint-aggregator.log")
	var d *daemonProc
	defer func() {
		if err := d.stop(stopTimeout); err != nil {
			logf("%v", err)
		}
		if retErr != nil && d != nil {
			retErr = fmt.Errorf("%w%s", retErr, d.logTail())
		}
	}()
	launch := func(p *floodPhase, unbounded bool) error {
		addr, err := freeLoopbackAddr()
		if err != nil {
			return err
		}
		// --profiling: floodSample forces collections through pprof's handler.
		args := append(daemonArgs(c, hub.KubeconfigPath, addr), "--profiling")
		p.Args = floodBounds(unbounded)
		// Before -daemon-flag's, which may override them.
		args = slices.Insert(args, len(args)-len(c.daemonFlags), p.Args...)
		d, err = startDaemon(c.binary, args, c.daemonEnv, addr, logPath)
		return err
	}
	timed := func(p *floodPhase, what string, n int) *latencyStats {
		lat, lost, err := timedChanges(ctx, ch, tr, n, nil)
		if err != nil {
			p.Errors = append(p.Errors, what+": "+err.Error())
		}
		s := summarize(lat, lost, 0)
		logf("flood: %s: %d changes, p50 %.1fms p99 %.1fms max %.1fms, %d lost", what, s.N, s.P50, s.P99, s.Max, s.Lost)
		return &s
	}

	// The bounded daemon, before the flood and while it comes.
	a := &floodPhase{Name: "bounded", OverBoundsAfter: -1, ReadyAfter: -1}
	res.Phases = append(res.Phases, a)
	logf("flood: starting the bounded daemon (%d members and the flooder)", c.members)
	if err := launch(a, false); err != nil {
		return nil, err
	}
	if _, err := waitDaemonConverged(ctx, tr, d, "flood cold"); err != nil {
		return nil, err
	}
	if err := waitExportInHub(ctx, hub.Client, d); err != nil {
		return nil, err
	}
	if _, err := d.waitSettled(ctx, settleQuiet, settleLimit); err != nil {
		return nil, err
	}
	before, err := floodSample(ctx, d)
	if err != nil {
		return nil, err
	}
	a.Before = &before
	logf("flood: before the flood: RSS %.1f MiB, peak %.1f MiB", before.RSS, before.Peak)
	a.Idle = timed(a, "idle, before the flood", c.changes)

	logf("flood: writing %d Services and %d EndpointSlices (%d endpoints) into the flooder", floodServices, floodSlices, floodEndpoints)
	w := watchFlood(ctx, d)
	t0 := time.Now()
	written := make(chan error, 1)
	go func() { written <- writeFlood(ctx, flooder.Client) }()
	var writeErr error
	lat, lost, err := timedChanges(ctx, ch, tr, c.changes, func() bool {
		select {
		case writeErr = <-written:
			written = nil
			return true
		default:
			return written == nil
		}
	})
	if written != nil {
		writeErr = <-written
	}
	if writeErr != nil {
		w.close()
		return nil, fmt.Errorf("flooder: %w", writeErr)
	}
	res.WriteSecs = time.Since(t0).Seconds()
	if err != nil {
		a.Errors = append(a.Errors, "during the flood writes: "+err.Error())
	}
	s := summarize(lat, lost, 0)
	a.Flooding = &s
	logf("flood: written in %.1fs; meanwhile %d changes, p50 %.1fms p99 %.1fms max %.1fms, %d lost", res.WriteSecs, s.N, s.P50, s.P99, s.Max, s.Lost)
	w.waitFor(ctx, floodWait, "the flooder's over_bounds", func() bool { return !w.overAt.IsZero() })
	a.Held = timed(a, "flood held", c.changes)
	if err := a.finish(ctx, d, hub.Client, w, t0); err != nil {
		return nil, err
	}

	// The bounded daemon restarted against the flood.
	r := &floodPhase{Name: "bounded, restarted against the flood", OverBoundsAfter: -1, ReadyAfter: -1}
	res.Phases = append(res.Phases, r)
	logf("flood: restarting the bounded daemon against the flood")
	if err := d.stop(stopTimeout); err != nil {
		return nil, err
	}
	if err := launch(r, false); err != nil {
		return nil, err
	}
	w = watchFlood(ctx, d)
	w.waitFor(ctx, floodWait, "the flooder's over_bounds", func() bool { return !w.overAt.IsZero() })
	// Readiness waits for the flooder to sync or time out (--member-sync-timeout).
	w.waitFor(ctx, floodWait, "readiness", func() bool { return !w.readyAt.IsZero() })
	if err := r.finish(ctx, d, hub.Client, w, d.started); err != nil {
		return nil, err
	}

	if c.flood.unbounded {
		u := &floodPhase{Name: "unbounded (read bounds 0), started against the flood", OverBoundsAfter: -1, ReadyAfter: -1}
		res.Phases = append(res.Phases, u)
		logf("flood: starting a daemon with read bounds 0 against the flood")
		if err := d.stop(stopTimeout); err != nil {
			return nil, err
		}
		if err := launch(u, true); err != nil {
			return nil, err
		}
		w = watchFlood(ctx, d)
		if _, err := d.waitSettled(ctx, settleQuiet, settleLimit); err != nil {
			w.close()
			return nil, err
		}
		u.Held = timed(u, "unbounded, flood held", c.changes)
		if err := u.finish(ctx, d, hub.Client, w, d.started); err != nil {
			return nil, err
		}
	}
	res.Seconds = time.Since(start).Seconds()
	res.Machine.LoadAvgAfter = loadAvg()
	return res, nil
}

// finish samples the daemon's memory with the flood held, and what it says
// of the flooder; since is when OverBoundsAfter counts from.
func (p *floodPhase) finish(ctx context.Context, d *daemonProc, hub kubernetes.Interface, w *floodWatch, since time.Time) error {
	mem, err := floodSample(ctx, d)
	w.close()
	if err != nil {
		return err
	}
	p.After, p.MaxSampledRSS = mem, max(w.maxRSS, mem.RSS)
	if !w.overAt.IsZero() {
		p.OverBoundsAfter = w.overAt.Sub(since).Seconds()
	}
	// A daemon measured before the flood was ready before it.
	if !w.readyAt.IsZero() && p.Before == nil {
		p.ReadyAfter = w.readyAt.Sub(d.started).Seconds()
	}
	if m, err := d.scrape(ctx); err == nil {
		p.FlooderReasons = flooderReasons(m)
	}
	p.ExportInHub, err = exportInHub(ctx, hub)
	if err != nil {
		return err
	}
	p.Up = d.exited() == nil
	logf("flood: %s: RSS %.1f MiB (highest sampled %.1f), peak %.1f MiB; flooder reasons %q, over_bounds after %.1fs; its export's %d endpoints in the hub; up: %v",
		p.Name, p.After.RSS, p.MaxSampledRSS, p.After.Peak, p.FlooderReasons, p.OverBoundsAfter, p.ExportInHub, p.Up)
	if !p.Up {
		return d.exited()
	}
	return nil
}

// setUpFlooder registers the flooder with its own admin kubeconfig and
// gives it one exported Service; the flood comes later.
func setUpFlooder(ctx context.Context, hub kubernetes.Interface, fl *testenv.Cluster) error {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   daemonNamespace,
			Name:        "member-" + floodCluster,
			Labels:      map[string]string{clusters.LabelMemberCluster: "true"},
			Annotations: map[string]string{clusters.AnnotationClusterName: floodCluster},
		},
		Data: map[string][]byte{clusters.KubeconfigKey: fl.Kubeconfig},
	}
	if _, err := hub.CoreV1().Secrets(daemonNamespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("hub: registering the flooder: %w", err)
	}
	for _, ns := range []string{appNamespace, floodNamespace} {
		if err := createNamespace(ctx, fl.Client, ns); err != nil {
			return err
		}
	}
	svc := memberService(0)
	svc.Name, svc.Labels["app"], svc.Spec.Selector["app"] = floodExported, floodExported, floodExported
	if _, err := fl.Client.CoreV1().Services(appNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("flooder: %w", err)
	}
	sl := floodSlice(appNamespace, floodExported, 0, floodExportedEndpoints, func(i int) string { return fmt.Sprintf("192.168.0.%d", i+1) })
	if _, err := fl.Client.DiscoveryV1().EndpointSlices(appNamespace).Create(ctx, sl, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("flooder: %w", err)
	}
	return nil
}

// floodSlice is slice j of service svc in ns, with n endpoints at ip(i).
func floodSlice(ns, svc string, j, n int, ip func(i int) string) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%04d", svc, j),
			Labels: map[string]string{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for i := range n {
		ep := endpoint(svc, ip(i), i)
		ep.TargetRef.Namespace = ns
		sl.Endpoints = append(sl.Endpoints, ep)
	}
	return sl
}

// writeFlood creates the flood in the flooder: floodServices headless
// Services, and floodSlices EndpointSlices of memberSliceSize endpoints for
// the first of them, both at once.
func writeFlood(ctx context.Context, fl kubernetes.Interface) error {
	const svc0 = "flood-00000"
	var wg sync.WaitGroup
	var errS, errE error
	wg.Go(func() {
		errS = parallel(ctx, 8, floodServices, func(ctx context.Context, i int) error {
			name := fmt.Sprintf("flood-%05d", i)
			s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: floodNamespace, Name: name},
				Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": name},
					Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}}
			_, err := fl.CoreV1().Services(floodNamespace).Create(ctx, s, metav1.CreateOptions{})
			return err
		})
	})
	wg.Go(func() {
		errE = parallel(ctx, 8, floodSlices, func(ctx context.Context, j int) error {
			// 172.16.0.0/12, one address per endpoint.
			sl := floodSlice(floodNamespace, svc0, j, memberSliceSize, func(i int) string {
				n := 172<<24 | 16<<16 + j*memberSliceSize + i + 1
				return fmt.Sprintf("%d.%d.%d.%d", n>>24&0xff, n>>16&0xff, n>>8&0xff, n&0xff)
			})
			_, err := fl.DiscoveryV1().EndpointSlices(floodNamespace).Create(ctx, sl, metav1.CreateOptions{})
			return err
		})
	})
	wg.Wait()
	return errors.Join(errS, errE)
}

// timedChanges makes changes one at a time, as changer.idle does, in
// batches of ten: n of them, and with until set, on until it is true too.
// It returns the latencies and how many never showed.
func timedChanges(ctx context.Context, ch *changer, tr *tracker, n int, until func() bool) ([]time.Duration, int, error) {
	var lat []time.Duration
	lost := 0
	for done := 0; done < n || until != nil && !until(); done += 10 {
		r, err := ch.idle(ctx, tr, 10, idleGap, changeTimeout)
		lat, lost = append(lat, r.latencies...), lost+r.lost
		if err != nil {
			return lat, lost, err
		}
	}
	return lat, lost, nil
}
