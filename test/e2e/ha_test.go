package e2e

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	stdsync "sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
)

// TestStandbyTakesOverAConvergedHubWithoutWriting runs two replicas with
// leader election. Only the leader writes; when it stops, the standby, whose
// caches are warm, takes over and writes nothing to a converged hub.
func TestStandbyTakesOverAConvergedHubWithoutWriting(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	fast := func(o *app.Options) {
		o.LeaderElect, o.ShardMembers = true, false // one leader, warm standbys
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 4*time.Second, 3*time.Second, 500*time.Millisecond
	}
	leader := e.startDaemon(t, fast)
	exportService(t, e.east.Client, "cart")
	exportService(t, e.west.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-1", 1, 3, true))
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-1", 2, 2, true))
	waitFor(t, e, "cart", map[string]int{"east": 3, "west": 2}, map[string]int{"east": 3, "west": 2})
	leader.waitSettled(t)

	standby := e.startDaemon(t, fast)
	eventually(t, waitTimeout, func() error {
		if !standby.Ready() {
			return fmt.Errorf("standby not ready (caches not warm)")
		}
		return nil
	})
	// A change while the standby waits is written by the leader alone.
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-1", 1, 4, true))
	waitFor(t, e, "cart", map[string]int{"east": 4, "west": 2}, map[string]int{"east": 4, "west": 2})
	leader.waitSettled(t)
	if n := standby.writes.n.Load(); n != 0 {
		t.Fatalf("standby wrote %d times while another replica led", n)
	}

	before := e.ourObjects(t)
	leader.stop() // releases the lease
	eventually(t, waitTimeout, func() error {
		if standby.Controller.HasStarted() {
			return nil
		}
		return fmt.Errorf("standby has not taken over")
	})
	standby.waitSettled(t)
	if n := standby.writes.n.Load(); n != 0 {
		t.Errorf("takeover of a converged hub sent %d writes, want 0", n)
	}
	if after := e.ourObjects(t); !reflect.DeepEqual(before, after) {
		t.Errorf("hub objects changed across the takeover:\nbefore %v\n after %v", before, after)
	}
	// The new leader follows changes.
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-1", 2, 5, true))
	waitFor(t, e, "cart", map[string]int{"east": 4, "west": 5}, map[string]int{"east": 4, "west": 5})
}

// haFlags run a daemon process with leader election on short durations; the
// retry period is client-go's default-like 2s, so only watching the Lease
// makes a takeover faster than it.
var haFlags = []string{
	"--leader-elect=true",
	"--shard-members=false",
	"--leader-elect-lease-duration=4s",
	"--leader-elect-renew-deadline=3s",
	"--leader-elect-retry-period=2s",
	"--member-sync-timeout=10s",
}

// role reads a daemon process's /readyz: its status code and whether the
// body says it leads.
func (p *daemonProcess) role() (code int, leading bool, err error) {
	code, body, err := p.get("/readyz")
	return code, strings.Contains(body, "(leading)"), err
}

// TestWarmStandbyWinsEveryTakeoverOverAFreshReplacement kills the leader
// five times, alternating a graceful stop (SIGTERM: it releases the Lease)
// and SIGKILL (the Lease must expire), and starts a fresh replacement at
// once, as a Deployment does. The standby that was already running, with
// warm caches, wins every time: at once after a release (well under the 2s
// retry period), as soon as the Lease expires after a SIGKILL. Its /readyz
// answers 200 from the moment it leads.
func TestWarmStandbyWinsEveryTakeoverOverAFreshReplacement(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	exportService(t, e.east.Client, "cart")
	exportService(t, e.west.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-1", 1, 3, true))
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-1", 2, 2, true))
	bin := buildDaemon(t)

	leader := e.startDaemonProcess(t, bin, haFlags...)
	eventually(t, waitTimeout, func() error {
		if code, leading, err := leader.role(); err != nil || code != http.StatusOK || !leading {
			return fmt.Errorf("first replica: /readyz %d leading=%t err=%v", code, leading, err)
		}
		return nil
	})
	waitFor(t, e, "cart", map[string]int{"east": 3, "west": 2}, map[string]int{"east": 3, "west": 2})
	standby := e.startDaemonProcess(t, bin, haFlags...)
	waitStandby := func(p *daemonProcess) {
		t.Helper()
		eventually(t, waitTimeout, func() error {
			if code, leading, err := p.role(); err != nil || code != http.StatusOK || leading {
				return fmt.Errorf("standby: /readyz %d leading=%t err=%v", code, leading, err)
			}
			return nil
		})
	}
	waitStandby(standby)

	const leaseDuration = 4 * time.Second
	var report []string
	for round := 1; round <= 5; round++ {
		graceful := round%2 == 1
		how := "SIGKILL"
		t0 := time.Now()
		if graceful {
			how = "graceful"
			_ = leader.cmd.Process.Signal(syscall.SIGTERM)
		} else {
			_ = leader.cmd.Process.Signal(syscall.SIGKILL)
		}
		fresh := e.startDaemonProcess(t, bin, haFlags...)
		var lastRenewal time.Time
		if !graceful {
			<-leader.done
			l, err := e.hub.Client.CoordinationV1().Leases(daemonNamespace).Get(context.Background(), "endpoint-aggregator", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			lastRenewal = l.Spec.RenewTime.Time
		}

		var took time.Duration
		if err := waitUntil(leaseDuration+5*time.Second, 5*time.Millisecond, func() error {
			code, leading, err := standby.role()
			if err != nil || !leading {
				return fmt.Errorf("standby: /readyz %d leading=%t err=%v", code, leading, err)
			}
			took = time.Since(t0)
			if code != http.StatusOK {
				t.Errorf("round %d: the new leader's first /readyz as leader answered %d", round, code)
			}
			return nil
		}); err != nil {
			_, freshLeads, _ := fresh.role()
			t.Fatalf("round %d (%s): %v; the fresh replacement leads: %t\nstandby log:\n%s", round, how, err, freshLeads, standby.logTail(30))
		}
		if _, leading, _ := fresh.role(); leading {
			t.Errorf("round %d (%s): the fresh replacement leads too", round, how)
		}
		if n, _, err := standby.metric("endpoint_aggregator_leader"); err != nil || n != 1 {
			t.Errorf("round %d: new leader's endpoint_aggregator_leader = %v (%v), want 1", round, n, err)
		}
		line := fmt.Sprintf("%d %s %s", round, how, took.Round(time.Millisecond))
		if !graceful {
			// The Lease expires leaseDuration after the dead leader's
			// last renewal; the standby takes it then, not a poll later
			// (the retry period is 2s). The Lease's acquire time says
			// when; the margin is for a loaded machine.
			l, err := e.hub.Client.CoordinationV1().Leases(daemonNamespace).Get(context.Background(), "endpoint-aggregator", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if l.Spec.AcquireTime == nil {
				t.Fatalf("round %d: the new leader's Lease has no acquire time", round)
			}
			expired := l.Spec.AcquireTime.Sub(lastRenewal)
			line += fmt.Sprintf(" (%s after its last renewal)", expired.Round(time.Millisecond))
			if expired >= leaseDuration+time.Second {
				t.Errorf("round %d: took the Lease %s after the dead leader's last renewal, want just after the lease duration %s", round, expired, leaseDuration)
			}
		}
		report = append(report, line)
		t.Logf("round %s after the kill: the warm standby leads", line)
		if graceful && took >= time.Second {
			t.Errorf("round %d: graceful takeover took %s, want well under the 2s retry period", round, took)
		}
		<-leader.done
		if graceful && leader.err != nil {
			t.Errorf("round %d: the old leader exited with %v after SIGTERM\n%s", round, leader.err, leader.logTail(30))
		}
		waitStandby(fresh)
		leader, standby = standby, fresh
	}
	t.Logf("takeovers (round, kill, time to the standby leading): %s", strings.Join(report, "; "))
	// The last leader follows changes.
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-1", 2, 5, true))
	waitFor(t, e, "cart", map[string]int{"east": 3, "west": 5}, map[string]int{"east": 3, "west": 5})
}

// TestOnlyTheLeaderRecordsMemberEvents runs two replicas: each member Secret
// gets one MemberConnected, from the leader, and deleting one gets one
// MemberRemoved. A standby withdraws nothing, so it says nothing.
func TestOnlyTheLeaderRecordsMemberEvents(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	fast := func(o *app.Options) {
		o.LeaderElect, o.ShardMembers = true, false // one leader, warm standbys
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 4*time.Second, 3*time.Second, 2*time.Second
	}
	a := e.startDaemon(t, fast)
	b := e.startDaemon(t, fast)
	eventually(t, waitTimeout, func() error {
		if !a.Ready() || !b.Ready() {
			return fmt.Errorf("replicas not ready")
		}
		if a.Controller.HasStarted() == b.Controller.HasStarted() {
			return fmt.Errorf("want one leader: a %t, b %t", a.Controller.HasStarted(), b.Controller.HasStarted())
		}
		return nil
	})
	exactlyOne := func(secret, reason string) {
		t.Helper()
		eventually(t, waitTimeout, func() error {
			if n := eventCount(t, e, secret, reason); n != 1 {
				return fmt.Errorf("%d %s Events on Secret %s, want 1; events:\n%s", n, reason, secret, secretEvents(t, e, secret))
			}
			return nil
		})
	}
	exactlyOne("east", clusters.ReasonConnected)
	exactlyOne("west", clusters.ReasonConnected)
	if err := e.hub.Client.CoreV1().Secrets(daemonNamespace).Delete(context.Background(), "west", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	exactlyOne("west", clusters.ReasonMemberRemoved)
	// The Event broadcasters write asynchronously: a second one would have
	// arrived by now.
	time.Sleep(2 * time.Second)
	for secret, reason := range map[string]string{"east": clusters.ReasonConnected, "west": clusters.ReasonMemberRemoved} {
		if n := eventCount(t, e, secret, reason); n != 1 {
			t.Errorf("%d %s Events on Secret %s, want 1; events:\n%s", n, reason, secret, secretEvents(t, e, secret))
		}
	}
}

// haTiming is leader election whose retry period plus renew deadline is
// longer than the lease duration, as in haFlags: client-go's elector gives
// up a retry period plus the renew deadline after its last renewal, when a
// standby may have taken the Lease already, so the leader must count its
// deadline itself.
func haTiming(o *app.Options) {
	o.LeaderElect, o.ShardMembers = true, false // one leader, warm standbys
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = haLeaseDuration, haRenewDeadline, 1500*time.Millisecond
}

const haLeaseDuration, haRenewDeadline = 4 * time.Second, 3 * time.Second

// TestLeaderCutOffFromTheHubStopsWritingBeforeTheStandbyWrites holds every
// request the leader sends to the hub, as on a connection that stopped
// answering, while the standby still reaches the hub. The leader cannot
// renew; it must stop its workers within its renew deadline, and a write
// it had started must never reach the hub. The standby takes the Lease
// when it expires and writes the member change. Only then are the
// leader's requests let through again: nothing it sends now may be a
// write, and its late attempt to release the Lease must leave the new
// leader's Lease alone. Before the fix, client-go's elector released the
// Lease before it cancelled the workers' context, so the held write went
// through after the new leader's first write.
func TestLeaderCutOffFromTheHubStopsWritingBeforeTheStandbyWrites(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	e.register(t, "east", "east", e.east.Kubeconfig)
	exportService(t, e.east.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-1", 1, 3, true))

	gate := &hubGate{}
	oldWrites, newWrites := &writeLog{}, &writeLog{}
	oldCfg := rest.CopyConfig(e.hub.Config)
	oldCfg.Wrap(oldWrites.wrap) // inside the gate: what reaches the hub
	oldCfg.Wrap(gate.wrap)
	old := startDaemonOn(t, t, oldCfg, haTiming)
	eventually(t, waitTimeout, func() error {
		if !leads(old) {
			return fmt.Errorf("first replica does not lead")
		}
		return nil
	})
	waitFor(t, e, "cart", map[string]int{"east": 3}, map[string]int{"east": 3})
	newCfg := rest.CopyConfig(e.hub.Config)
	newCfg.Wrap(newWrites.wrap)
	standby := startDaemonOn(t, t, newCfg, haTiming)
	eventually(t, waitTimeout, func() error {
		if !standby.Ready() || leads(standby) {
			return fmt.Errorf("second replica: ready %t, leads %t; want a ready standby", standby.Ready(), leads(standby))
		}
		return nil
	})
	old.waitSettled(t)
	roles := watchRoles(t, old, standby)

	gate.hold()
	held := time.Now()
	// A change the leader starts to write and cannot finish.
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-1", 1, 4, true))
	eventually(t, waitTimeout, func() error {
		if gate.heldWrites() == 0 {
			return fmt.Errorf("the leader has not tried to write the change")
		}
		return nil
	})
	// The standby takes the expired Lease and writes the change.
	waitFor(t, e, "cart", map[string]int{"east": 4}, map[string]int{"east": 4})
	tookOver := time.Since(held)
	gate.open()
	eventually(t, waitTimeout, func() error {
		if !exited(old) {
			return fmt.Errorf("the old leader has not exited")
		}
		return nil
	})
	// Whatever the old leader held back has gone through by now; the hub
	// still converges on the new leader's view and it still leads.
	waitFor(t, e, "cart", map[string]int{"east": 4}, map[string]int{"east": 4})
	standby.waitSettled(t)
	roles.stop()

	first, ok := newWrites.first()
	if !ok {
		t.Fatal("the new leader wrote nothing; the test shows nothing")
	}
	stopped, ok := roles.stoppedAt(0)
	if !ok {
		t.Fatal("the old leader never stopped leading")
	}
	t.Logf("leader cut off: it stopped its workers %s after the hold (renew deadline %s); the standby's first write %s after it (the hub showed the change %s after it)",
		stopped.Sub(held).Round(time.Millisecond), haRenewDeadline, first.sent.Sub(held).Round(time.Millisecond), tookOver.Round(time.Millisecond))
	if !stopped.Before(first.sent) {
		t.Errorf("the old leader ran workers until %s after the hold, after the new leader's first write (%s at %s)",
			stopped.Sub(held).Round(time.Millisecond), first.what, first.sent.Sub(held).Round(time.Millisecond))
	}
	for _, w := range oldWrites.all() {
		if !w.done.Before(first.sent) {
			t.Errorf("the old leader's write %s reached the hub %s after the hold, after the new leader's first write at %s",
				w.what, w.sent.Sub(held).Round(time.Millisecond), first.sent.Sub(held).Round(time.Millisecond))
		}
	}
	if at, both := roles.overlap(); both {
		t.Errorf("both replicas ran workers %s after the hold", at.Sub(held).Round(time.Millisecond))
	}
	if !leads(standby) || leads(old) {
		t.Errorf("after the handover: new leader leads %t, old one %t; want only the new one", leads(standby), leads(old))
	}
}

// TestHubFrozenPastTheLeaseDurationLeavesOneLeaderAndNoOverlap freezes the
// hub's apiserver (SIGSTOP) for longer than the lease duration, with a
// member change pending: both replicas hang. The leader must stop its
// workers within its renew deadline, while the hub is still frozen; after
// the thaw exactly one replica leads, the new leader's first write comes
// after the old leader's last, and the change arrives. Before the fix the
// leader's workers ran on until client-go's elector had also given up
// releasing the Lease, a further renew deadline, or until the thaw.
func TestHubFrozenPastTheLeaseDurationLeavesOneLeaderAndNoOverlap(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	e.register(t, "east", "east", e.east.Kubeconfig)
	exportService(t, e.east.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-1", 1, 3, true))

	logs := []*writeLog{{}, {}}
	start := func(l *writeLog) *daemon {
		cfg := rest.CopyConfig(e.hub.Config)
		cfg.Wrap(l.wrap)
		return startDaemonOn(t, t, cfg, haTiming)
	}
	a := start(logs[0])
	eventually(t, waitTimeout, func() error {
		if !leads(a) {
			return fmt.Errorf("first replica does not lead")
		}
		return nil
	})
	waitFor(t, e, "cart", map[string]int{"east": 3}, map[string]int{"east": 3})
	b := start(logs[1])
	eventually(t, waitTimeout, func() error {
		if !b.Ready() || leads(b) {
			return fmt.Errorf("second replica: ready %t, leads %t; want a ready standby", b.Ready(), leads(b))
		}
		return nil
	})
	a.waitSettled(t)
	roles := watchRoles(t, a, b)

	if err := e.hub.FreezeAPIServer(); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := e.hub.ThawAPIServer(); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer thaw()
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-1", 1, 4, true))
	if err := waitUntil(haLeaseDuration+time.Second, 10*time.Millisecond, func() error {
		if leads(a) {
			return fmt.Errorf("the leader still runs its workers")
		}
		return nil
	}); err != nil {
		t.Errorf("hub frozen for %s (renew deadline %s): %v", time.Since(frozen).Round(time.Millisecond), haRenewDeadline, err)
	}
	// Frozen past the lease duration: on the standby's clock the Lease has
	// expired before the hub answers again.
	time.Sleep(time.Until(frozen.Add(haLeaseDuration + 500*time.Millisecond)))
	thaw()
	thawedAt := time.Now()

	waitFor(t, e, "cart", map[string]int{"east": 4}, map[string]int{"east": 4})
	eventually(t, waitTimeout, func() error {
		if !leads(b) || !exited(a) {
			return fmt.Errorf("after the thaw: b leads %t, a exited %t; want b leading, a gone", leads(b), exited(a))
		}
		return nil
	})
	b.waitSettled(t)
	roles.stop()

	stopped, ok := roles.stoppedAt(0)
	if !ok {
		t.Fatal("the old leader never stopped leading")
	}
	if !stopped.Before(thawedAt) {
		t.Errorf("the old leader ran workers until %s after the freeze, after the thaw at %s",
			stopped.Sub(frozen).Round(time.Millisecond), thawedAt.Sub(frozen).Round(time.Millisecond))
	}
	first, ok := logs[1].first()
	if !ok {
		t.Fatal("the new leader wrote nothing; the test shows nothing")
	}
	t.Logf("hub frozen for %s: the old leader stopped its workers %s after the freeze (renew deadline %s); the new leader's first write %s after it",
		thawedAt.Sub(frozen).Round(time.Millisecond), stopped.Sub(frozen).Round(time.Millisecond), haRenewDeadline, first.sent.Sub(frozen).Round(time.Millisecond))
	if !stopped.Before(first.sent) {
		t.Errorf("the old leader ran workers until after the new leader's first write")
	}
	for _, w := range logs[0].all() {
		if !w.done.Before(first.sent) {
			t.Errorf("the old leader's write %s ended %s after the freeze, after the new leader's first write at %s",
				w.what, w.done.Sub(frozen).Round(time.Millisecond), first.sent.Sub(frozen).Round(time.Millisecond))
		}
	}
	if at, both := roles.overlap(); both {
		t.Errorf("both replicas ran workers %s after the freeze", at.Sub(frozen).Round(time.Millisecond))
	}
	if leads(a) {
		t.Error("the old leader leads again")
	}
}

// hubGate stands between one replica and the hub. While held, the
// replica's new requests wait, as on a connection that stopped answering
// (its open watches go on); one whose caller gives up meanwhile never
// reaches the hub, the others go on when the gate opens.
type hubGate struct {
	mu      stdsync.Mutex
	closed  chan struct{} // non-nil while held; closed by open
	waiting int           // writes of hub objects waiting now or before
}

func (g *hubGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed == nil {
		g.closed = make(chan struct{})
	}
}

func (g *hubGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed != nil {
		close(g.closed)
		g.closed = nil
	}
}

// heldWrites is how many writes of hub objects have waited at the gate.
func (g *hubGate) heldWrites() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

func (g *hubGate) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		g.mu.Lock()
		closed := g.closed
		if closed != nil && isObjectWrite(r) {
			g.waiting++
		}
		g.mu.Unlock()
		if closed != nil {
			select {
			case <-closed:
			case <-r.Context().Done():
				if r.Body != nil {
					_ = r.Body.Close()
				}
				return nil, r.Context().Err()
			}
		}
		return rt.RoundTrip(r)
	})
}

// isObjectWrite tells the writes of hub objects (member Leases included)
// from reads, Events and the leader election Lease.
func isObjectWrite(r *http.Request) bool {
	return r.Method != http.MethodGet && !strings.Contains(r.URL.Path, "/events") &&
		!strings.HasSuffix(r.URL.Path, "/leases/endpoint-aggregator")
}

// writeLog notes each write of hub objects a replica sends: when it was
// sent and when its answer came, so the hub applied it in between.
type writeLog struct {
	mu     stdsync.Mutex
	writes []hubWrite
}

type hubWrite struct {
	what       string
	sent, done time.Time
}

func (l *writeLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if !isObjectWrite(r) {
			return rt.RoundTrip(r)
		}
		w := hubWrite{what: r.Method + " " + r.URL.Path, sent: time.Now()}
		resp, err := rt.RoundTrip(r)
		w.done = time.Now()
		l.mu.Lock()
		l.writes = append(l.writes, w)
		l.mu.Unlock()
		return resp, err
	})
}

func (l *writeLog) all() []hubWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]hubWrite(nil), l.writes...)
}

// first is the write sent first.
func (l *writeLog) first() (hubWrite, bool) {
	var first hubWrite
	for _, w := range l.all() {
		if first.sent.IsZero() || w.sent.Before(first.sent) {
			first = w
		}
	}
	return first, !first.sent.IsZero()
}

// leads reads the daemon's endpoint_aggregator_leader gauge: whether it
// runs the workers now.
func leads(d *daemon) bool {
	mfs, err := d.Gatherer.Gather()
	if err != nil {
		return false
	}
	for _, mf := range mfs {
		if mf.GetName() == "endpoint_aggregator_leader" && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue() == 1
		}
	}
	return false
}

// exited reports whether the daemon's Run returned, leaving its result for
// stop.
func exited(d *daemon) bool {
	select {
	case err := <-d.done:
		d.done <- err
		return true
	default:
		return false
	}
}

// roleLog samples every few milliseconds which replicas run workers.
type roleLog struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu      stdsync.Mutex
	stopped []time.Time // per replica, the first sample not leading after one leading
	both    time.Time   // the first sample with more than one leading
}

func watchRoles(t *testing.T, ds ...*daemon) *roleLog {
	ctx, cancel := context.WithCancel(context.Background())
	r := &roleLog{cancel: cancel, done: make(chan struct{}), stopped: make([]time.Time, len(ds))}
	t.Cleanup(r.stop)
	was := make([]bool, len(ds))
	for i, d := range ds {
		was[i] = leads(d)
	}
	go func() {
		defer close(r.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			now, n := time.Now(), 0
			r.mu.Lock()
			for i, d := range ds {
				l := leads(d)
				if l {
					n++
				} else if was[i] && r.stopped[i].IsZero() {
					r.stopped[i] = now
				}
				was[i] = l
			}
			if n > 1 && r.both.IsZero() {
				r.both = now
			}
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *roleLog) stop() {
	r.cancel()
	<-r.done
}

// stoppedAt is when replica i was first seen not leading after leading.
func (r *roleLog) stoppedAt(i int) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped[i], !r.stopped[i].IsZero()
}

// overlap is when two replicas were first seen leading at once.
func (r *roleLog) overlap() (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.both, !r.both.IsZero()
}
