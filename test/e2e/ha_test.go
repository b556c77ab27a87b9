package e2e

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
)

// TestStandbyTakesOverAConvergedHubWithoutWriting runs two replicas with
// leader election. Only the leader writes; when it stops, the standby, whose
// caches are warm, takes over and writes nothing to a converged hub.
func TestStandbyTakesOverAConvergedHubWithoutWriting(t *testing.T) {
	e := startEnv(t)
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	fast := func(o *app.Options) {
		o.LeaderElect = true
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
			// last renewal; the standby takes it then, not a poll later.
			expired := t0.Add(took).Sub(lastRenewal)
			line += fmt.Sprintf(" (%s after its last renewal)", expired.Round(time.Millisecond))
			if expired >= leaseDuration+500*time.Millisecond {
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
	e := startEnv(t)
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	fast := func(o *app.Options) {
		o.LeaderElect = true
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
