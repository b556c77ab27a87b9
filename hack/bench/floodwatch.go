package main

// What the flood measures of the daemon while it runs (its memory, when it
// saw the flooder over its bounds, when it was ready) and the report.

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// floodWatch follows the daemon while the flood is on: its VmRSS every half
// second, and from its metrics when the flooder first showed over_bounds
// and when /readyz first answered.
type floodWatch struct {
	maxRSS          float64 // MiB; valid after close
	overAt, readyAt time.Time
	mu              sync.Mutex
	stop, done      chan struct{}
}

func watchFlood(ctx context.Context, d *daemonProc) *floodWatch {
	w := &floodWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			rss := procStatusMiB(d.cmd.Process.Pid, "VmRSS")
			w.mu.Lock()
			w.maxRSS = max(w.maxRSS, rss)
			checkOver, checkReady := w.overAt.IsZero() && i%2 == 0, w.readyAt.IsZero() && i%2 == 1
			w.mu.Unlock()
			if checkOver {
				if m, err := d.scrape(ctx); err == nil && slices.Contains(flooderReasons(m), "over_bounds") {
					w.mu.Lock()
					w.overAt = time.Now()
					w.mu.Unlock()
				}
			}
			if checkReady && d.ready(ctx) {
				w.mu.Lock()
				w.readyAt = time.Now()
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-ctx.Done():
				return
			case <-d.done:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return w
}

// waitFor waits until seen (called with w.mu held) is true, or timeout.
func (w *floodWatch) waitFor(ctx context.Context, timeout time.Duration, what string, seen func() bool) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		w.mu.Lock()
		ok := seen()
		w.mu.Unlock()
		select {
		case <-w.done:
			return
		default:
		}
		if ok {
			return
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	logf("flood: no %s within %s", what, timeout)
}

func (w *floodWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// floodSample reads the daemon's memory as the benchmark does, its peak
// RSS from /proc, then its live heap.
func floodSample(ctx context.Context, d *daemonProc) (floodMemory, error) {
	m, err := sampleMemory(ctx, d, 5, time.Second)
	if err != nil {
		return floodMemory{}, err
	}
	return floodMemory{RSS: m.RSSBytes / (1 << 20), Heap: m.HeapInuseBytes / (1 << 20),
		Peak: procStatusMiB(d.cmd.Process.Pid, "VmHWM"), Live: collectedLiveHeap(ctx, d) / (1 << 20)}, nil
}

// procStatusMiB reads a "NAME: N kB" field of /proc/PID/status in MiB; -1
// where there is none.
func procStatusMiB(pid int, key string) float64 {
	v := strings.TrimSuffix(procField(fmt.Sprintf("/proc/%d/status", pid), key), " kB")
	kb, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return -1
	}
	return kb / 1024
}

// flooderReasons are the reasons the daemon's metrics give for the flooder
// failing now.
func flooderReasons(m metrics) []string {
	var out []string
	for _, s := range m["endpoint_aggregator_member_cluster_error"] {
		if s.labels["cluster"] == floodCluster && s.value == 1 {
			out = append(out, s.labels["reason"])
		}
	}
	slices.Sort(out)
	return out
}

// exportInHub counts the endpoints of the flooder's exported Service in
// the hub's slices.
func exportInHub(ctx context.Context, hub kubernetes.Interface) (int, error) {
	sel := labels.Set{mcsv1beta1.LabelSourceCluster: floodCluster, mcsv1beta1.LabelServiceName: floodExported}.String()
	l, err := hub.DiscoveryV1().EndpointSlices(appNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return 0, fmt.Errorf("hub: list EndpointSlices: %w", err)
	}
	n := 0
	for _, s := range l.Items {
		n += len(s.Endpoints)
	}
	return n, nil
}

// waitExportInHub waits until the hub holds the flooder's export.
func waitExportInHub(ctx context.Context, hub kubernetes.Interface, d *daemonProc) error {
	deadline := time.Now().Add(convergeLimit)
	for {
		n, err := exportInHub(ctx, hub)
		if err != nil || n == floodExportedEndpoints {
			return err
		}
		if err := d.exited(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hub: %d of the flooder's %d exported endpoints after %s", n, floodExportedEndpoints, convergeLimit)
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// writeText prints the report.
func (r *floodResult) writeText(out io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	p("Flood: bounded memory per member. Run of %s, %.0f s, with `%s`.", r.StartedAt.Format("2006-01-02"), r.Seconds, r.Command)
	p("Machine: %d CPUs (%s), %d GiB memory; Kubernetes %s, etcd %s. Load average before/after: %s / %s.",
		r.Machine.CPUs, r.Machine.CPUModel, r.Machine.MemoryGiB, r.Machine.Kubernetes, r.Machine.Etcd, r.Machine.LoadAvgBefore, r.Machine.LoadAvgAfter)
	p("The flooder: a member with a kube-apiserver and etcd of its own, exporting one Service (%d endpoints) before the flood, then serving %d headless Services and %d endpoints (%d EndpointSlices of %d, one Service name), none exported, written in %.1f s: %dx the daemon's import bounds.",
		floodExportedEndpoints, floodServices, floodEndpoints, floodSlices, memberSliceSize, r.WriteSecs, floodFactor)
	p("The other members: %d simulated members (views of one shared member apiserver) exporting %d Services of %d endpoints each.", r.Members, r.Services, r.Endpoints)
	p("")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DAEMON\tBOUNDS\tRSS BEFORE\tRSS FLOOD HELD\tHIGHEST SAMPLED RSS\tPEAK RSS (VmHWM)\tHEAP IN USE\tLIVE HEAP\tFLOODER REASON\tOVER_BOUNDS AFTER\tREADY AFTER\tEXPORT IN HUB\tSTAYED UP")
	for _, ph := range r.Phases {
		before := "—"
		if ph.Before != nil {
			before = fmt.Sprintf("%.1f MiB (peak %.1f, live heap %.1f)", ph.Before.RSS, ph.Before.Peak, ph.Before.Live)
		}
		over := "never"
		if ph.OverBoundsAfter >= 0 {
			over = fmt.Sprintf("%.1f s", ph.OverBoundsAfter)
		}
		ready := "—"
		if ph.ReadyAfter >= 0 {
			ready = fmt.Sprintf("%.1f s", ph.ReadyAfter)
		}
		reasons := strings.Join(ph.FlooderReasons, ",")
		if reasons == "" {
			reasons = "none"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f MiB\t%.1f MiB\t%.1f MiB\t%.1f MiB\t%.1f MiB\t%s\t%s\t%s\t%d of %d\t%v\n", ph.Name, strings.Join(ph.Args, " "), before,
			ph.After.RSS, ph.MaxSampledRSS, ph.After.Peak, ph.After.Heap, ph.After.Live, reasons, over, ready, ph.ExportInHub, floodExportedEndpoints, ph.Up)
	}
	_ = tw.Flush()
	p("")
	p("RSS: median of 5 scrapes of process_resident_memory_bytes; highest sampled: VmRSS read every 0.5 s from the flood's start (or the process's); peak: VmHWM at the end; live heap: after forced collections (median of three), what the daemon holds. OVER_BOUNDS AFTER counts from the flood's start for the first daemon, from the process's start for the others; READY AFTER (/readyz 200) from the process's start, for the daemons started against the flood.")
	if len(r.Phases) == 3 && r.Phases[0].Before != nil {
		base, unb := r.Phases[0].Before.RSS, r.Phases[2].After.RSS
		share := float64(floodReadFactor) / floodFactor
		implied := base + share*(unb-base)
		verdict := "under"
		if max(r.Phases[0].MaxSampledRSS, r.Phases[1].MaxSampledRSS) > implied {
			verdict = "NOT under"
		}
		p("What the read bounds imply: at most %.0f%% of the flood held, so RSS at most %.1f MiB (RSS before the flood, %.1f, plus %.0f%% of the %.1f MiB more that the unbounded daemon holds with the whole flood). Bounded daemon with the flood held: %.1f MiB (highest sampled %.1f); restarted against it: %.1f MiB (highest sampled %.1f): %s.",
			100*share, implied, base, 100*share, unb-base, r.Phases[0].After.RSS, r.Phases[0].MaxSampledRSS, r.Phases[1].After.RSS, r.Phases[1].MaxSampledRSS,
			verdict)
		lb, lu := r.Phases[0].Before.Live, r.Phases[2].After.Live
		p("Live heap, the same way: at most %.1f MiB implied (%.1f before, plus %.0f%% of the unbounded daemon's %.1f MiB more); bounded with the flood held %.1f MiB, restarted against it %.1f MiB.",
			lb+share*(lu-lb), lb, 100*share, lu-lb, r.Phases[0].After.Live, r.Phases[1].After.Live)
	}
	p("")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OTHER MEMBERS' CHANGES\tN\tP50\tP99\tMAX\tLOST")
	row := func(name string, s *latencyStats) {
		if s != nil {
			fmt.Fprintf(tw, "%s\t%d\t%.1f ms\t%.1f ms\t%.1f ms\t%d\n", name, s.N, s.P50, s.P99, s.Max, s.Lost)
		}
	}
	for _, ph := range r.Phases {
		row(ph.Name+", before the flood (idle)", ph.Idle)
		row(ph.Name+", while the flood was written", ph.Flooding)
		row(ph.Name+", flood held", ph.Held)
	}
	_ = tw.Flush()
	p("")
	p("Changes: one endpoint replaced in a member EndpointSlice, one at a time (%v apart), timed until a hub watch shows the new address; nearest-rank quantiles. While the flood was written, changes went on in tens until the writes ended.", idleGap)
	for _, ph := range r.Phases {
		for _, e := range ph.Errors {
			p("%s: %s", ph.Name, e)
		}
	}
}
