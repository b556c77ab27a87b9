package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// soakConfig holds the -soak flags. A soak replaces the benchmark's phases:
// one daemon under steady churn for the duration, members flapping
// unreachable and back, one restart at half time, sampled every interval.
type soakConfig struct {
	duration    time.Duration
	flapEvery   time.Duration
	flapDown    time.Duration
	flapMembers int
	warmup      time.Duration
	sample      time.Duration
	plot        string
}

const (
	// soakGrowthLimit is the most a sampled figure may grow after warm-up.
	soakGrowthLimit = 0.05
	// soakFinalWait bounds the wait for the last changes and for the hub to
	// equal the members once the soak ends.
	soakFinalWait = 5 * time.Minute
)

func (s *soakConfig) addFlags(fs *flag.FlagSet) {
	fs.DurationVar(&s.duration, "soak", 0, "run a soak of this duration instead of the benchmark (`make soak`): steady churn (-churn), members flapping unreachable, one daemon restart at half time; 0: the benchmark")
	fs.DurationVar(&s.flapEvery, "soak-flap-every", 3*time.Minute, "soak: make some members unreachable this often")
	fs.DurationVar(&s.flapDown, "soak-flap-down", time.Minute, "soak: how long flapped members stay unreachable (less than -soak-flap-every)")
	fs.IntVar(&s.flapMembers, "soak-flap-members", 0, "soak: how many members each flap makes unreachable (0: a tenth of -members, at least 1)")
	fs.DurationVar(&s.warmup, "soak-warmup", 5*time.Minute, "soak: samples this soon after the start, or after the restart, are left out of the growth check")
	fs.DurationVar(&s.sample, "soak-sample", time.Minute, "soak: sample the daemon this often")
	fs.StringVar(&s.plot, "soak-plot", "bin/soak.svg", "soak: write the plot (SVG) here; with -doc, the doc links to it (empty: no plot)")
}

func (s *soakConfig) validate(members int) error {
	var errs []error
	if s.sample <= 0 || s.duration < 2*s.sample {
		errs = append(errs, errors.New("-soak must be at least two -soak-sample intervals, and -soak-sample positive"))
	}
	if s.flapEvery <= 0 || s.flapDown <= 0 || s.flapDown >= s.flapEvery {
		errs = append(errs, errors.New("-soak-flap-every and -soak-flap-down must be positive, -soak-flap-down the shorter"))
	}
	if s.flapMembers < 0 || s.flapMembers > members {
		errs = append(errs, errors.New("-soak-flap-members must be in 0..-members"))
	}
	if s.warmup < 0 {
		errs = append(errs, errors.New("-soak-warmup must not be negative"))
	}
	if s.flapMembers == 0 {
		s.flapMembers = max(1, members/10)
	}
	return errors.Join(errs...)
}

// soakMain runs the soak and returns the exit code.
func soakMain(c *config) int {
	if c.replicas > 0 || c.profileDir != "" || c.jsonOut != "" {
		fmt.Fprintln(os.Stderr, "bench: -replicas, -profile-dir and -json are the benchmark's, not the soak's")
		return 2
	}
	if err := c.soak.validate(c.members); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 2
	}
	timeout := c.timeout
	timeoutSet := false
	flag.Visit(func(f *flag.Flag) { timeoutSet = timeoutSet || f.Name == "timeout" })
	if !timeoutSet {
		timeout = c.soak.duration + 30*time.Minute
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	res, err := runSoak(ctx, c)
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
			fmt.Fprintln(os.Stderr, "\nbench: interrupted")
		} else {
			fmt.Fprintf(os.Stderr, "\nbench: %v\n", err)
		}
		return 1
	}
	fmt.Println()
	res.writeText(os.Stdout)
	if c.soak.plot != "" {
		if err := os.MkdirAll(filepath.Dir(c.soak.plot), 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 1
		}
		if err := os.WriteFile(c.soak.plot, []byte(res.svg()), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 1
		}
		fmt.Printf("\nPlot written to %s\n", c.soak.plot)
	}
	if c.doc != "" {
		if err := res.updateDoc(c.doc, c.soak.plot); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 1
		}
		fmt.Printf("Report written into %s\n", c.doc)
	}
	if !res.passed() {
		return 1
	}
	return 0
}

// soakCommand is the command line of this soak, for the report.
func soakCommand(c *config) string {
	s := c.soak
	return fmt.Sprintf("go run ./hack/bench -members %d -services %d -endpoints %d -churn %g -soak %s -soak-flap-every %s -soak-flap-down %s -soak-flap-members %d -soak-warmup %s -soak-sample %s",
		c.members, c.services, c.endpoints, c.churn, shortDuration(s.duration), shortDuration(s.flapEvery), shortDuration(s.flapDown),
		s.flapMembers, shortDuration(s.warmup), shortDuration(s.sample)) +
		extraFlags(append(append([]string(nil), c.daemonFlags...), c.daemonEnv...))
}

// runSoak starts the hub and the member, the daemon, and soaks it.
func runSoak(ctx context.Context, c *config) (_ *soakResult, retErr error) {
	s := c.soak
	res := &soakResult{
		Command: soakCommand(c), StartedAt: time.Now().UTC().Truncate(time.Second), Machine: describeMachine(),
		Members: c.members, Services: c.services, Endpoints: c.endpoints, Churn: c.churn,
		Interval: s.sample, Warmup: s.warmup, FlapEvery: s.flapEvery, FlapDown: s.flapDown, FlapMembers: s.flapMembers,
		Duration: s.duration,
	}
	for _, at := range flapWindows(s) {
		res.Flaps = append(res.Flaps, [2]time.Duration{at, at + s.flapDown})
	}
	tmp, doneLogs, err := logDir("soak")
	if err != nil {
		return nil, err
	}
	defer func() { doneLogs(c.keepLogs || retErr != nil) }()

	cs, stopClusters, err := startClusters("hub", "member")
	if err != nil {
		return nil, err
	}
	defer stopClusters()
	hub, member := cs[0], cs[1]
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
	gate := newSoakGate()
	wrap := proxyWrap(gate.serve)
	proxy.wrap.Store(&wrap)
	if err := createNamespace(ctx, hub.Client, appNamespace); err != nil {
		return nil, err
	}
	if err := warmUp(ctx, hub); err != nil {
		return nil, err
	}
	if err := registerMembers(ctx, hub.Client, f, proxy); err != nil {
		return nil, fmt.Errorf("hub: registering members: %w", err)
	}
	ch := newChanger(f, member.Client)
	tr, _, err := startTracker(ctx, "soak", f, c, hub)
	if err != nil {
		return nil, err
	}
	defer tr.close()

	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	// --profiling: the samples force collections through pprof's handler.
	args := append(daemonArgs(c, hub.KubeconfigPath, addr), "--profiling")
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
	logf("soak: starting the daemon (%d members)", c.members)
	if d, err = startDaemon(c.binary, args, c.daemonEnv, addr, logPath); err != nil {
		return nil, err
	}
	if _, err := waitDaemonConverged(ctx, tr, d, "soak cold"); err != nil {
		return nil, err
	}
	if _, err := d.waitSettled(ctx, settleQuiet, settleLimit); err != nil {
		return nil, err
	}
	logf("soak: converged after %.1fs; soaking for %s (churn %g/s, %d members unreachable for %s every %s, restart at half time)",
		time.Since(d.started).Seconds(), s.duration, c.churn, s.flapMembers, s.flapDown, s.flapEvery)

	begin := time.Now()
	var events soakEvents
	churnDone := make(chan churnResult, 1)
	go func() { churnDone <- ch.churn(ctx, tr, c.churn, s.duration) }()
	flapCtx, stopFlaps := context.WithCancel(ctx)
	flapsDone := make(chan struct{})
	go func() {
		defer close(flapsDone)
		runFlaps(flapCtx, f.members, s, begin, gate, &events)
	}()
	defer func() {
		stopFlaps()
		<-flapsDone
	}()

	n := int(s.duration / s.sample)
	restartAt := int(math.Round(float64(n) / 2))
	procStart, proc := 0, 1
	for k := 0; k <= n; k++ {
		if err := waitUntil(ctx, d, begin.Add(time.Duration(k)*s.sample)); err != nil {
			return nil, err
		}
		smp := sampleDaemon(ctx, d, gate)
		smp.LiveHeapCollected = collectedLiveHeap(ctx, d)
		smp.Minute = time.Duration(k) * s.sample
		smp.Process = proc
		smp.Age = time.Duration(k-procStart) * s.sample
		smp.Events = events.take()
		res.Samples = append(res.Samples, smp)
		logf("soak: %s", formatSampleLine(smp))
		if k == restartAt && k < n {
			logf("soak: restarting the daemon (SIGTERM, then the same command)")
			t0 := time.Now()
			if err := d.stop(stopTimeout); err != nil {
				return nil, err
			}
			stopped := time.Since(t0)
			if d, err = startDaemon(c.binary, args, c.daemonEnv, addr, logPath); err != nil {
				return nil, err
			}
			events.add(fmt.Sprintf("daemon restarted (stopped in %.1f s)", stopped.Seconds()))
			res.RestartAt = smp.Minute
			procStart, proc = k, proc+1
			go func(d *daemonProc) {
				for ctx.Err() == nil && d.exited() == nil {
					if d.ready(ctx) {
						events.add(fmt.Sprintf("restarted daemon ready after %.1f s", time.Since(d.started).Seconds()))
						return
					}
					sleepCtx(ctx, 200*time.Millisecond)
				}
			}(d)
		}
	}
	cr := <-churnDone
	stopFlaps()
	<-flapsDone
	gate.setDown(f.members, false)
	res.ChurnIssued, res.ChurnRate = cr.issued, cr.rate()
	res.FlapRefused = gate.refused.Load()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	logf("soak: churn done (%d changes, %.1f/s); waiting for the hub to equal the members", cr.issued, cr.rate())
	res.ChurnMissing = waitAll(ctx, cr.pendings, soakFinalWait)
	if _, err := waitDaemonConverged(ctx, tr, d, "soak final"); err != nil {
		return nil, err
	}
	res.HubKeys, res.HubDiffering, err = waitHubEqualsMembers(ctx, hub.Client, f, d, soakFinalWait)
	if err != nil {
		return nil, err
	}
	res.Seconds = time.Since(start).Seconds()
	res.Machine.LoadAvgAfter = loadAvg()
	return res, nil
}

// waitUntil sleeps until t, failing if the daemon exits meanwhile.
func waitUntil(ctx context.Context, d *daemonProc, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-d.done:
		return d.exited()
	case <-timer.C:
		return nil
	}
}

// collectedLiveHeap forces a collection in the daemon (its pprof heap
// handler with gc=1, served with --profiling) and reads the live heap that
// collection found, three times two seconds apart, and returns the median.
// A collection the runtime starts on its own comes at a moment of its
// choosing, so its live heap swings with the work in flight; three forced
// ones a minute sample that work at fixed moments instead. NaN if none
// could be read.
func collectedLiveHeap(ctx context.Context, d *daemonProc) float64 {
	var v []float64
	for i := range 3 {
		if i > 0 {
			sleepCtx(ctx, 2*time.Second)
		}
		if err := d.forceGC(ctx); err != nil {
			logf("soak: forcing a collection: %v", err)
			continue
		}
		m, err := d.scrape(ctx)
		if err != nil {
			continue
		}
		if x := m.value("go_gc_heap_live_bytes"); x > 0 {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	return middle(v)
}

// sampleDaemon reads the daemon's figures as the benchmark does (medians of
// five scrapes a second apart, which smooths the heap's sawtooth); a figure
// it cannot read is NaN.
func sampleDaemon(ctx context.Context, d *daemonProc, gate *soakGate) soakSample {
	smp := soakSample{RSS: math.NaN(), Heap: math.NaN(), LiveHeap: math.NaN(), Goroutines: math.NaN(), Down: gate.anyDown()}
	smp.Watches = float64(gate.watches.Load())
	for try := 0; try < 3 && ctx.Err() == nil; try++ {
		mem, err := sampleMemory(ctx, d, 5, time.Second)
		if err == nil {
			smp.RSS, smp.Heap, smp.Goroutines = mem.RSSBytes, mem.HeapInuseBytes, mem.Goroutines
			if mem.HeapLiveBytes >= 0 {
				smp.LiveHeap = mem.HeapLiveBytes
			}
			break
		}
		logf("soak: sampling the daemon: %v", err)
		sleepCtx(ctx, 2*time.Second)
	}
	return smp
}

// soakEvents are what happened between samples.
type soakEvents struct {
	mu   sync.Mutex
	list []string
}

func (e *soakEvents) add(s string) {
	logf("soak: %s", s)
	e.mu.Lock()
	e.list = append(e.list, s)
	e.mu.Unlock()
}

func (e *soakEvents) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.list
	e.list = nil
	return out
}

// flapWindows returns when each flap starts (after begin), all of them
// over before the soak ends. Flaps start half a sample interval after a
// sample, so that samples fall clearly inside or outside them.
func flapWindows(s soakConfig) []time.Duration {
	var out []time.Duration
	for at := s.flapEvery + s.sample/2; at+s.flapDown < s.duration-s.sample/2; at += s.flapEvery {
		out = append(out, at)
	}
	return out
}

// flapRange is the members flap j (from 0) makes unreachable: a block of n
// consecutive names, moving on with every flap.
func flapRange(members []string, n, j int) []string {
	if n >= len(members) {
		return members
	}
	from := (j * n) % (len(members) - n + 1)
	return members[from : from+n]
}

// runFlaps makes members unreachable and reachable again on schedule until
// the schedule or ctx ends; reachable again in every case.
func runFlaps(ctx context.Context, members []string, s soakConfig, begin time.Time, gate *soakGate, events *soakEvents) {
	for j, at := range flapWindows(s) {
		sleepCtx(ctx, time.Until(begin.Add(at)))
		if ctx.Err() != nil {
			return
		}
		names := flapRange(members, s.flapMembers, j)
		span := names[0] + ".." + names[len(names)-1]
		gate.setDown(names, true)
		events.add(fmt.Sprintf("members %s unreachable", span))
		sleepCtx(ctx, s.flapDown)
		gate.setDown(names, false)
		events.add(fmt.Sprintf("members %s back", span))
	}
}

// soakGate stands between the daemon and the member views: it answers 503
// for a member made unreachable (its probe then fails with Unhealthy) and
// cuts that member's open requests, watches included; and it counts the
// watches open through it.
type soakGate struct {
	mu      sync.Mutex
	down    map[string]bool
	open    map[string]map[uint64]context.CancelFunc
	seq     uint64
	watches atomic.Int64
	refused atomic.Int64
}

func newSoakGate() *soakGate {
	return &soakGate{down: map[string]bool{}, open: map[string]map[uint64]context.CancelFunc{}}
}

func (g *soakGate) serve(view string, w http.ResponseWriter, r *http.Request, next http.Handler) {
	g.mu.Lock()
	if g.down[view] {
		g.mu.Unlock()
		g.refused.Add(1)
		http.Error(w, "bench soak: member made unreachable", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	g.seq++
	id := g.seq
	if g.open[view] == nil {
		g.open[view] = map[uint64]context.CancelFunc{}
	}
	g.open[view][id] = cancel
	g.mu.Unlock()
	// Deferred: a cut stream ends the handler with a panic (http.ErrAbortHandler).
	defer func() {
		g.mu.Lock()
		delete(g.open[view], id)
		g.mu.Unlock()
		cancel()
	}()
	if w := r.URL.Query().Get("watch"); w == "true" || w == "1" {
		g.watches.Add(1)
		defer g.watches.Add(-1)
	}
	next.ServeHTTP(w, r.WithContext(ctx))
}

// setDown makes views unreachable (cutting their open requests) or
// reachable again.
func (g *soakGate) setDown(views []string, down bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, v := range views {
		if !down {
			delete(g.down, v)
			continue
		}
		g.down[v] = true
		for _, cancel := range g.open[v] {
			cancel()
		}
	}
}

func (g *soakGate) anyDown() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.down) > 0
}

// waitHubEqualsMembers compares the addresses of the hub's EndpointSlices,
// by source cluster and service, with what the members hold, until they are
// equal or timeout passes; it returns the member services compared and how
// many differ (hub keys of no member service count as differing).
func waitHubEqualsMembers(ctx context.Context, hub kubernetes.Interface, f *fleet, d *daemonProc, timeout time.Duration) (keys, differing int, err error) {
	deadline := time.Now().Add(timeout)
	for {
		keys, differing, err = hubDiff(ctx, hub, f)
		if err != nil || differing == 0 || time.Now().After(deadline) {
			return keys, differing, err
		}
		if err := d.exited(); err != nil {
			return keys, differing, err
		}
		logf("soak: %d of %d member services differ in the hub", differing, keys)
		sleepCtx(ctx, 5*time.Second)
		if err := ctx.Err(); err != nil {
			return keys, differing, err
		}
	}
}

func hubDiff(ctx context.Context, hub kubernetes.Interface, f *fleet) (keys, differing int, err error) {
	got := map[string]map[string]bool{}
	opts := metav1.ListOptions{
		LabelSelector: labels.Set{discoveryv1.LabelManagedBy: endpoints.SliceManagedByValue}.String(),
		Limit:         500,
	}
	for {
		l, err := hub.DiscoveryV1().EndpointSlices(appNamespace).List(ctx, opts)
		if err != nil {
			return 0, 0, fmt.Errorf("hub: list EndpointSlices: %w", err)
		}
		for i := range l.Items {
			s := &l.Items[i]
			k := s.Labels[mcsv1beta1.LabelSourceCluster] + "/" + s.Labels[mcsv1beta1.LabelServiceName]
			if got[k] == nil {
				got[k] = map[string]bool{}
			}
			for _, ep := range s.Endpoints {
				for _, a := range ep.Addresses {
					got[k][a] = true
				}
			}
		}
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
	}
	want := map[string]map[string]bool{}
	for m := range f.members {
		for s := range f.services {
			set := map[string]bool{}
			for _, sl := range f.memberSlices(m, s) {
				for _, ep := range sl.Endpoints {
					for _, a := range ep.Addresses {
						set[a] = true
					}
				}
			}
			want[f.members[m]+"/"+serviceName(s)] = set
		}
	}
	return len(want), countDiffering(want, got), nil
}

// countDiffering counts the keys whose sets differ between want and got.
func countDiffering(want, got map[string]map[string]bool) int {
	n := 0
	for k, w := range want {
		if !sameSet(w, got[k]) {
			n++
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			n++
		}
	}
	return n
}

func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
