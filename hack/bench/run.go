package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

const (
	idleGap        = 100 * time.Millisecond
	changeTimeout  = time.Minute
	convergeLimit  = 15 * time.Minute
	settleQuiet    = 3 * time.Second
	settleLimit    = 10 * time.Minute
	stopTimeout    = 30 * time.Second
	backlogPickPct = 10 // live change once this share of the backlog is in the hub
)

// run starts the clusters, measures the floor, then the daemon, and stops
// everything it started, whatever happens.
func run(ctx context.Context, c *config) (_ *results, retErr error) {
	r := newResults(c)
	tmp, doneLogs, err := logDir("bench")
	if err != nil {
		return nil, err
	}
	defer func() { doneLogs(c.keepLogs || retErr != nil) }()
	if c.profileDir != "" {
		if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
			return nil, err
		}
	}

	cs, stopClusters, err := startClusters("hub", "floor", "member")
	if err != nil {
		return nil, err
	}
	defer stopClusters()
	hub, floorHub, member := cs[0], cs[1], cs[2]
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	f := newFleet(c.members, c.services, c.endpoints)
	logf("member: creating %d Services and %d EndpointSlices (%d members x %d services x %d endpoints)",
		c.services, c.members*c.services*len(f.slices[0][0]), c.members, c.services, c.endpoints)
	t0 := time.Now()
	if err := f.populate(ctx, member.Client); err != nil {
		return nil, err
	}
	logf("member: populated in %s", time.Since(t0).Round(time.Millisecond))

	proxy, err := startMemberProxy(member.Config, f.members)
	if err != nil {
		return nil, err
	}
	defer proxy.close()
	for _, h := range []*testenv.Cluster{hub, floorHub} {
		if err := createNamespace(ctx, h.Client, appNamespace); err != nil {
			return nil, err
		}
		if err := warmUp(ctx, h); err != nil {
			return nil, err
		}
	}
	if err := registerMembers(ctx, hub.Client, f, proxy); err != nil {
		return nil, fmt.Errorf("hub: registering members: %w", err)
	}
	ch := newChanger(f, member.Client)

	if err := runFloor(ctx, c, r, f, floorHub, proxy, ch); err != nil {
		return nil, err
	}
	// The daemon's member requests are counted from here: the floors'
	// lists and watch went through the same proxy.
	floorRequests := proxy.requests.Load()
	logf("floor: done; stopping the floor hub")
	if err := floorHub.Stop(); err != nil {
		logf("%v", err)
	}
	if err := runDaemon(ctx, c, r, f, hub, tmp, ch); err != nil {
		return nil, err
	}
	if c.replicas > 0 {
		if err := runReplicaPhases(ctx, c, r, f, hub, tmp, ch); err != nil {
			return nil, err
		}
	}
	r.finish(proxy.requests.Load() - floorRequests)
	return r, nil
}

// startTracker starts the tracker name of the aggregated objects in h and
// returns it with its mcs-api client; the caller closes the tracker.
func startTracker(ctx context.Context, name string, f *fleet, c *config, h *testenv.Cluster) (*tracker, mcsclientset.Interface, error) {
	hubMCS, err := mcsclientset.NewForConfig(h.Config)
	if err != nil {
		return nil, nil, err
	}
	tr := newTracker(name, f, c.mode())
	if err := tr.start(ctx, h.Client, hubMCS); err != nil {
		tr.close()
		return nil, nil, err
	}
	return tr, hubMCS, nil
}

// runDaemon measures endpoint-aggregator against the hub.
func runDaemon(ctx context.Context, c *config, r *results, f *fleet, hub *testenv.Cluster, tmp string, ch *changer) (retErr error) {
	tr, hubMCS, err := startTracker(ctx, "daemon", f, c, hub)
	if err != nil {
		return err
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
	start := func() error {
		addr, err := freeLoopbackAddr()
		if err != nil {
			return err
		}
		args := daemonArgs(c, hub.KubeconfigPath, addr)
		if r.Daemon.Args == nil {
			// Recorded without this machine's paths and ports.
			r.Daemon.Args = slices.Clone(args)
			for i, a := range r.Daemon.Args {
				switch a {
				case hub.KubeconfigPath:
					r.Daemon.Args[i] = "<hub kubeconfig>"
				case addr:
					r.Daemon.Args[i] = "127.0.0.1:<free port>"
				}
			}
		}
		d, err = startDaemon(c.binary, args, c.daemonEnv, addr, logPath)
		return err
	}

	// Cold start, -runs times: each run but the first on an emptied hub.
	// The counters (writes, CPU, requests) are the last run's, whose daemon
	// goes on with the phases below.
	var cold, ready []float64
	var m metrics
	var cpuCold chan error
	for i := range c.runs {
		last := i == c.runs-1
		if i > 0 {
			if err := d.stop(stopTimeout); err != nil {
				return err
			}
			logf("daemon: emptying the hub for cold run %d of %d", i+1, c.runs)
			if err := emptyHub(ctx, hub.Config); err != nil {
				return err
			}
			if err := tr.waitEmpty(ctx, convergeLimit); err != nil {
				return err
			}
		}
		logf("daemon: cold start against an empty hub (%d members)%s", c.members, runOf(i, c.runs))
		if err := start(); err != nil {
			return err
		}
		readyAt := make(chan time.Duration, 1)
		go func(d *daemonProc) {
			for ctx.Err() == nil && d.exited() == nil {
				if d.ready(ctx) {
					readyAt <- time.Since(d.started)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}(d)
		if c.profileDir != "" && last {
			cpuCold = make(chan error, 1)
			go func(d *daemonProc) {
				cpuCold <- d.profile(ctx, "profile?seconds=30", c.profileDir, "cpu-cold.pprof")
			}(d)
		}
		at, err := waitDaemonConverged(ctx, tr, d, "daemon cold")
		if err != nil {
			return err
		}
		cold = append(cold, at.Sub(d.started).Seconds())
		select {
		case rd := <-readyAt:
			ready = append(ready, rd.Seconds())
		default:
		}
		m, err = d.waitSettled(ctx, settleQuiet, settleLimit)
		if err != nil {
			return err
		}
		logf("daemon: converged in %.2fs with %d hub writes (%s)", cold[i], int64(m.hubWrites()), m.writesByResource(nil))
	}
	r.Daemon.ColdRuns = spreadOf(cold)
	r.Daemon.ColdSeconds = r.Daemon.ColdRuns.Median
	r.Daemon.ReadySeconds = median(ready)
	r.Daemon.ColdWrites = int64(m.hubWrites())
	r.Daemon.ColdWritesDetail = m.writesByResource(nil)
	r.Daemon.ColdCPUSeconds = m.value("process_cpu_seconds_total")
	r.Daemon.ColdFailedWrites = int64(m.failedWrites())
	r.Daemon.ColdSyncs, r.Daemon.ColdSyncsDetail = m.syncsByResult(nil)
	r.Daemon.ColdRequests = m.requests(nil)
	logf("daemon: cold convergence median %.2fs (ready after %.2fs); hub reads %s", r.Daemon.ColdSeconds, r.Daemon.ReadySeconds, r.Daemon.ColdRequests.reads())
	if cpuCold != nil {
		if err := <-cpuCold; err != nil {
			logf("profiling: %v", err)
		}
		if err := d.profile(ctx, "heap", c.profileDir, "heap-cold.pprof"); err != nil {
			logf("profiling: %v", err)
		}
	}

	// Single changes, one at a time, -runs times on the same daemon; the
	// counters cover all runs.
	m0, err := d.scrape(ctx)
	if err != nil {
		return err
	}
	ev0 := tr.rvChanges.Load()
	var m1 metrics
	var before, after map[string]string
	for i := range c.runs {
		logf("daemon: %d single changes, one at a time%s", c.changes, runOf(i, c.runs))
		if before, err = snapshotRVs(ctx, hub.Client, hubMCS); err != nil {
			return err
		}
		idle, err := ch.idle(ctx, tr, c.changes, idleGap, changeTimeout)
		if err != nil {
			return err
		}
		if m1, err = d.waitSettled(ctx, settleQuiet, settleLimit); err != nil {
			return err
		}
		if after, err = snapshotRVs(ctx, hub.Client, hubMCS); err != nil {
			return err
		}
		s := summarize(idle.latencies, idle.lost, 0)
		r.Daemon.IdleRuns = append(r.Daemon.IdleRuns, s)
		r.Daemon.IdleObjectsChanged += diffRVs(before, after)
		logf("daemon: idle p50 %.1fms p99 %.1fms", s.P50, s.P99)
	}
	ev1 := tr.rvChanges.Load()
	r.Daemon.Idle = medianStats(r.Daemon.IdleRuns)
	r.Daemon.IdleWrites = int64(m1.hubWrites() - m0.hubWrites())
	r.Daemon.IdleWritesDetail = m1.writesByResource(m0)
	r.Daemon.IdleRVChanges = ev1 - ev0
	r.Daemon.IdleChanges = c.changes * c.runs
	r.Daemon.IdleSyncs, r.Daemon.IdleSyncsDetail = m1.syncsByResult(m0)
	r.Daemon.IdleRequests = m1.requests(m0)
	r.Daemon.IdleAllocsPerChange, r.Daemon.IdleAllocBytesPerChange = -1, -1
	if len(m1["go_memstats_mallocs_total"]) > 0 && len(m1["go_memstats_alloc_bytes_total"]) > 0 {
		r.Daemon.IdleAllocsPerChange = m1.delta("go_memstats_mallocs_total", m0) / float64(r.Daemon.IdleChanges)
		r.Daemon.IdleAllocBytesPerChange = m1.delta("go_memstats_alloc_bytes_total", m0) / float64(r.Daemon.IdleChanges)
	}
	r.Daemon.IdlePropagationP50 = 1000 * m1.histogramQuantile("endpoint_aggregator_endpoint_propagation_seconds", 0.5, m0)
	r.Daemon.IdlePropagationP99 = 1000 * m1.histogramQuantile("endpoint_aggregator_endpoint_propagation_seconds", 0.99, m0)
	logf("daemon: idle p50 %.1fms p99 %.1fms (medians); %d hub writes (%s), %d resourceVersion changes, %d objects changed; hub reads %s; %.0f allocations per change",
		r.Daemon.Idle.P50, r.Daemon.Idle.P99, r.Daemon.IdleWrites, r.Daemon.IdleWritesDetail, r.Daemon.IdleRVChanges, r.Daemon.IdleObjectsChanged,
		r.Daemon.IdleRequests.reads(), r.Daemon.IdleAllocsPerChange)

	// Churn, -runs times on the same daemon; the counters cover all runs.
	if c.churn > 0 && c.churnDuration > 0 {
		m0, err := d.scrape(ctx)
		if err != nil {
			return err
		}
		var cpuChurn chan error
		if c.profileDir != "" {
			cpuChurn = make(chan error, 1)
			secs := max(1, int(min(c.churnDuration, 30*time.Second).Seconds()))
			go func(d *daemonProc) {
				cpuChurn <- d.profile(ctx, fmt.Sprintf("profile?seconds=%d", secs), c.profileDir, "cpu-churn.pprof")
			}(d)
		}
		ev0 := tr.rvChanges.Load()
		var ds []float64
		var m1 metrics
		issued := 0
		for i := range c.runs {
			logf("daemon: churn at %g changes/s for %s%s", c.churn, c.churnDuration, runOf(i, c.runs))
			depthDone := make(chan struct{})
			depths := make(chan []float64, 1)
			go func(d *daemonProc) { depths <- sampleDepth(ctx, d, depthDone) }(d)
			res := ch.churn(ctx, tr, c.churn, c.churnDuration)
			close(depthDone)
			ds = append(ds, <-depths...)
			missing := waitAll(ctx, res.pendings, 2*time.Minute)
			if m1, err = d.waitSettled(ctx, settleQuiet, settleLimit); err != nil {
				return err
			}
			s := summarizePending(res, missing)
			r.Daemon.ChurnRuns = append(r.Daemon.ChurnRuns, s)
			issued += res.issued
			logf("daemon: churn %.0f/s achieved, p50 %.1fms p99 %.1fms", s.Rate, s.P50, s.P99)
		}
		r.Daemon.Churn = medianStats(r.Daemon.ChurnRuns)
		r.Daemon.ChurnWrites = int64(m1.hubWrites() - m0.hubWrites())
		r.Daemon.ChurnRVChanges = tr.rvChanges.Load() - ev0
		r.Daemon.ChurnWritesDetail = m1.writesByResource(m0)
		r.Daemon.ChurnRequests = m1.requests(m0)
		r.Daemon.ChurnPropagationP50 = 1000 * m1.histogramQuantile("endpoint_aggregator_endpoint_propagation_seconds", 0.5, m0)
		r.Daemon.ChurnPropagationP99 = 1000 * m1.histogramQuantile("endpoint_aggregator_endpoint_propagation_seconds", 0.99, m0)
		r.Daemon.ChurnSyncs, r.Daemon.ChurnSyncsDetail = m1.syncsByResult(m0)
		r.Daemon.ChurnSyncP50 = 1000 * m1.histogramQuantile("endpoint_aggregator_sync_duration_seconds", 0.5, m0)
		r.Daemon.ChurnSyncP99 = 1000 * m1.histogramQuantile("endpoint_aggregator_sync_duration_seconds", 0.99, m0)
		if len(ds) > 0 {
			r.Daemon.ChurnQueueDepthMedian, r.Daemon.ChurnQueueDepthMax = median(ds), slices.Max(ds)
		}
		r.Daemon.ChurnQueueWaitP50 = 1000 * m1.histogramQuantile("endpoint_aggregator_workqueue_queue_duration_seconds", 0.5, m0)
		r.Daemon.ChurnQueueWaitP99 = 1000 * m1.histogramQuantile("endpoint_aggregator_workqueue_queue_duration_seconds", 0.99, m0)
		r.Daemon.ChurnCPUSeconds = m1.value("process_cpu_seconds_total") - m0.value("process_cpu_seconds_total")
		r.Daemon.ChurnGCCPUSeconds, r.Daemon.ChurnGoCPUSeconds = m1.gcCPU(m0)
		logf("daemon: churn %.0f/s achieved, p50 %.1fms p99 %.1fms (medians); %d hub writes for %d changes; hub reads %s; GC %.1f of %.1f CPU-seconds",
			r.Daemon.Churn.Rate, r.Daemon.Churn.P50, r.Daemon.Churn.P99, r.Daemon.ChurnWrites, issued, r.Daemon.ChurnRequests.reads(),
			r.Daemon.ChurnGCCPUSeconds, r.Daemon.ChurnGoCPUSeconds)
		if cpuChurn != nil {
			if err := <-cpuChurn; err != nil {
				logf("profiling: %v", err)
			}
		}
	}

	// Memory at steady state: converged, settled, after everything above.
	mem, err := sampleMemory(ctx, d, 5, time.Second)
	if err != nil {
		return err
	}
	r.Daemon.Memory = mem
	logf("daemon: heap in use %.1f MiB, RSS %.1f MiB", mem.HeapInuseBytes/(1<<20), mem.RSSBytes/(1<<20))
	if c.profileDir != "" {
		if err := d.profile(ctx, "heap?gc=1", c.profileDir, "heap-steady.pprof"); err != nil {
			logf("profiling: %v", err)
		}
		if err := d.profile(ctx, "goroutine", c.profileDir, "goroutine-steady.pprof"); err != nil {
			logf("profiling: %v", err)
		}
	}

	// Restart against the converged hub.
	logf("daemon: restart against the converged hub")
	if err := d.stop(stopTimeout); err != nil {
		return err
	}
	before, err = snapshotRVs(ctx, hub.Client, hubMCS)
	if err != nil {
		return err
	}
	ev0 = tr.rvChanges.Load()
	if err := start(); err != nil {
		return err
	}
	m, err = d.waitSettled(ctx, settleQuiet, settleLimit)
	if err != nil {
		return err
	}
	r.Daemon.RestartSettledSeconds = time.Since(d.started).Seconds() - settleQuiet.Seconds()
	after, err = snapshotRVs(ctx, hub.Client, hubMCS)
	if err != nil {
		return err
	}
	r.Daemon.RestartWrites = int64(m.hubWrites())
	r.Daemon.RestartWritesDetail = m.writesByResource(nil)
	r.Daemon.RestartLeaseWrites = int64(m.leaseWrites())
	r.Daemon.RestartRequests = m.requests(nil)
	r.Daemon.RestartRVChanges = tr.rvChanges.Load() - ev0
	r.Daemon.RestartObjectsChanged = diffRVs(before, after)
	logf("daemon: restart settled after %.1fs with %d hub writes (%d Lease writes), %d objects changed",
		r.Daemon.RestartSettledSeconds, r.Daemon.RestartWrites, r.Daemon.RestartLeaseWrites, r.Daemon.RestartObjectsChanged)

	// Restart with a backlog, and one live change made while it is worked off.
	if err := d.stop(stopTimeout); err != nil {
		return err
	}
	logf("daemon: stopped; changing one endpoint in each of the %d member services", c.members*c.services)
	keys := ch.distinctKeys(c.members * c.services)
	backlog := make([]*pending, len(keys))
	if err := parallel(ctx, 16, len(keys), func(ctx context.Context, i int) error {
		ms, ep := ch.randomSlice(keys[i][0], keys[i][1])
		p, err := ch.change(ctx, tr, ms, ep)
		backlog[i] = p
		return err
	}); err != nil {
		return err
	}
	logf("daemon: restart with a backlog of %d changed member services", len(backlog))
	if err := start(); err != nil {
		return err
	}
	live, remaining, err := liveChangeDuringBacklog(ctx, tr, d, ch, keys, backlog)
	if err != nil {
		return err
	}
	r.Daemon.BacklogKeys = len(backlog)
	r.Daemon.BacklogRemainingAtLiveChange = remaining
	if d, ok := live.latency(); ok {
		r.Daemon.LiveChangeMillis = float64(d.Microseconds()) / 1000
	} else {
		r.Daemon.LiveChangeMillis = -1
	}
	missing := waitAll(ctx, backlog, convergeLimit)
	var last time.Time
	for _, p := range backlog {
		if _, ok := p.latency(); ok && p.seen.After(last) {
			last = p.seen
		}
	}
	r.Daemon.BacklogMissing = missing
	r.Daemon.BacklogDrainSeconds = last.Sub(d.started).Seconds()
	m, err = d.waitSettled(ctx, settleQuiet, settleLimit)
	if err != nil {
		return err
	}
	r.Daemon.BacklogWrites = int64(m.hubWrites())
	r.Daemon.BacklogRequests = m.requests(nil)
	logf("daemon: live change took %.1fms with %d of %d backlog changes not yet in the hub; backlog drained after %.1fs",
		r.Daemon.LiveChangeMillis, remaining, len(backlog), r.Daemon.BacklogDrainSeconds)
	return ctx.Err()
}

// runOf tells which run of a repeated phase this is, for the log.
func runOf(i, n int) string {
	if n == 1 {
		return ""
	}
	return fmt.Sprintf(" (run %d of %d)", i+1, n)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// waitDaemonConverged is tracker.waitConverged that fails as soon as the
// daemon exits.
func waitDaemonConverged(ctx context.Context, tr *tracker, d *daemonProc, what string) (time.Time, error) {
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-d.done:
			cancel(d.exited())
		case <-cctx.Done():
		}
	}()
	at, err := tr.waitConverged(cctx, convergeLimit, what)
	if err != nil && context.Cause(cctx) != nil && ctx.Err() == nil {
		return at, context.Cause(cctx)
	}
	return at, err
}

// liveChangeDuringBacklog waits until the restarted daemon has brought some
// of the backlog into the hub, then changes a member service whose backlog
// change is already in (its key was synced: the new change is queued anew)
// and returns that change and how much of the backlog was still missing.
func liveChangeDuringBacklog(ctx context.Context, tr *tracker, d *daemonProc, ch *changer, keys [][2]int, backlog []*pending) (*pending, int, error) {
	want := max(1, len(backlog)*backlogPickPct/100)
	deadline := time.Now().Add(convergeLimit)
	for {
		if err := d.exited(); err != nil {
			return nil, 0, err
		}
		if time.Now().After(deadline) {
			return nil, 0, errors.New("daemon: the restart backlog did not start to drain")
		}
		seen, pick := 0, -1
		for i, p := range backlog {
			if _, ok := p.latency(); ok {
				seen++
				pick = i
			}
		}
		if seen >= want || (seen > 0 && seen == len(backlog)) {
			remaining := len(backlog) - seen
			ms := ch.f.slices[keys[pick][0]][keys[pick][1]][0]
			live, err := ch.change(ctx, tr, ms, ch.intn(memberSliceSize))
			if err != nil {
				return nil, 0, err
			}
			select {
			case <-live.done:
			case <-time.After(convergeLimit):
			case <-ctx.Done():
				return nil, 0, ctx.Err()
			}
			return live, remaining, nil
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// sampleDepth reads the daemon's workqueue depth every second until done.
func sampleDepth(ctx context.Context, d *daemonProc, done <-chan struct{}) []float64 {
	var out []float64
	for {
		select {
		case <-done:
			return out
		case <-ctx.Done():
			return out
		case <-time.After(time.Second):
		}
		if m, err := d.scrape(ctx); err == nil {
			out = append(out, m.sum("endpoint_aggregator_workqueue_depth", func(l map[string]string) bool { return l["name"] == "endpoint_aggregator" }))
		}
	}
}
