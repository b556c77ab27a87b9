package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	stdsync "sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/shard"
)

// leaderLeaseName is the leader Lease of the replica processes: the default
// --leader-election-id.
const leaderLeaseName = "endpoint-aggregator"

// shardFlags run a replica process that shares the members, on short lease
// timings.
var shardFlags = []string{
	"--leader-elect=true",
	"--shard-members",
	"--leader-elect-lease-duration=4s",
	"--leader-elect-renew-deadline=3s",
	"--leader-elect-retry-period=500ms",
	"--member-sync-timeout=10s",
	"--shutdown-timeout=15s",
}

// TestShardedReplicasSurviveKillsPausesAndRescalesWithoutOverlappingWriters
// runs three replica processes that share six members while the members'
// slices keep changing. One replica is SIGKILLed, one SIGSTOPped past its lease,
// the set is scaled 3 → 1 → 3, and every replica is restarted in turn.
// After each step the hub equals the members. Each replica reaches the hub
// as its own user, and the hub API server's audit log is the oracle: no
// write to a member's hub objects ever comes from a replica other than the
// one its fence named when the write arrived, and no write to the merged
// objects from one other than the leader Lease's holder.
func TestShardedReplicasSurviveKillsPausesAndRescalesWithoutOverlappingWriters(t *testing.T) {
	t.Parallel()
	names := []string{"east", "west", "north", "south", "central", "edge"}
	specs := []testenv.Spec{{Name: "hub", Options: testenv.Options{CRDs: true, Audit: true}}}
	for _, n := range names {
		specs = append(specs, testenv.Spec{Name: n, Options: testenv.Options{CRDs: true}})
	}
	cs := testenv.StartAllT(t, specs...)
	hub := cs[0]
	e := &env{hub: hub, east: cs[1], west: cs[2], hubMCS: mcsclientset.NewForConfigOrDie(hub.Config)}
	mustCreateNamespace(t, hub.Client, daemonNamespace)
	for _, c := range cs {
		mustCreateNamespace(t, c.Client, appNamespace)
	}
	members := map[string]*testenv.Cluster{}
	for i, n := range names {
		members[n] = cs[i+1]
		e.register(t, n, n, cs[i+1].Kubeconfig)
		exportService(t, cs[i+1].Client, "cart")
	}

	// Churn: one member's slice changes every 150ms.
	var mu stdsync.Mutex
	want := map[string]int{}
	for i, n := range names {
		want[n] = 2
		applySlices(t, members[n].Client, "cart", endpointSlice("cart", "cart-1", i+1, 2, true))
	}
	churnCtx, stopChurn := context.WithCancel(context.Background())
	defer stopChurn()
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		rng := rand.New(rand.NewPCG(7, 11))
		for churnCtx.Err() == nil {
			i := rng.IntN(len(names))
			n := 1 + rng.IntN(4)
			mu.Lock()
			if err := setSlices(churnCtx, members[names[i]].Client, "cart", endpointSlice("cart", "cart-1", i+1, n, true)); err == nil {
				want[names[i]] = n
			}
			mu.Unlock()
			time.Sleep(150 * time.Millisecond)
		}
	}()
	// converged changes every member once more, so that each must be
	// served by some replica, and waits until the hub shows the members.
	converged := func(step string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		for i, n := range names {
			want[n] = 1 + (want[n] % 4)
			applySlices(t, members[n].Client, "cart", endpointSlice("cart", "cart-1", i+1, want[n], true))
		}
		if err := waitUntil(waitTimeout, 200*time.Millisecond, func() error {
			st := e.hubState(t, "cart")
			if !reflect.DeepEqual(st.total, want) || !reflect.DeepEqual(st.ready, want) {
				return fmt.Errorf("hub slices total %v ready %v; members %v", st.total, st.ready, want)
			}
			return nil
		}); err != nil {
			t.Fatalf("after %s: %v", step, err)
		}
		t.Logf("converged after %s", step)
	}

	bin := buildDaemon(t)
	users := 0
	start := func() *daemonProcess {
		t.Helper()
		users++
		kc, err := hub.UserKubeconfig(fmt.Sprintf("replica-%d", users), "system:masters")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "kubeconfig")
		if err := os.WriteFile(path, kc, 0o600); err != nil {
			t.Fatal(err)
		}
		return e.startDaemonProcess(t, bin, append([]string{"--kubeconfig", path}, shardFlags...)...)
	}
	running := []*daemonProcess{start(), start(), start()}
	converged("three replicas started")

	running[0].kill()
	running = append(running[1:], start())
	converged("SIGKILL of a replica, and its replacement")

	_ = running[0].cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(7 * time.Second) // past its lease duration: its members move
	converged("SIGSTOP of a replica past its lease")
	_ = running[0].cmd.Process.Signal(syscall.SIGCONT)
	converged("SIGCONT of the paused replica")

	running[1].terminate(t)
	running[2].terminate(t)
	running = running[:1]
	converged("scaling 3 → 1")
	running = append(running, start(), start())
	converged("scaling 1 → 3")

	for i := range running {
		running[i].terminate(t)
		running[i] = start()
		converged(fmt.Sprintf("restart %d of 3", i+1))
	}
	stopChurn()
	<-churned
	converged("the churn stopped")

	w := checkNoOverlappingWriters(t, hub.AuditLogPath, names)
	t.Logf("audit log: %d writes to member objects checked against %d fence holder changes, %d to merged objects against %d leader changes",
		w.member, w.fenceChanges, w.merged, w.leaderChanges)
	if w.member == 0 || w.fenceChanges < len(names)+3 || w.merged == 0 || w.leaderChanges < 3 {
		t.Fatalf("audit log: %+v: the oracle saw too little", w)
	}
}

// auditEvent is what the oracle reads of an audit.k8s.io/v1 Event.
type auditEvent struct {
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"responseStatus"`
	// RequestObject is a Lease's or an EndpointSlice's, with the fields
	// the oracles read.
	RequestObject *struct {
		Spec struct {
			HolderIdentity *string `json:"holderIdentity"`
		} `json:"spec"`
		Endpoints []auditEndpoint `json:"endpoints"`
	} `json:"requestObject"`
	Received metav1.MicroTime `json:"requestReceivedTimestamp"`
	Done     metav1.MicroTime `json:"stageTimestamp"`
}

// auditEndpoint is what the oracles read of an EndpointSlice's endpoint.
type auditEndpoint struct {
	Addresses  []string `json:"addresses"`
	Conditions struct {
		Ready *bool `json:"ready"`
	} `json:"conditions"`
	Zone  *string `json:"zone"`
	Hints *struct {
		ForZones []struct {
			Name string `json:"name"`
		} `json:"forZones"`
		ForNodes []any `json:"forNodes"`
	} `json:"hints"`
}

// hintedForItsZone reports whether ep's hints, if any, are the ones the
// daemon writes: one zone, the endpoint's own, and no node.
func (ep auditEndpoint) hintedForItsZone() bool {
	h := ep.Hints
	return h == nil || len(h.ForNodes) == 0 && len(h.ForZones) == 1 && ep.Zone != nil && h.ForZones[0].Name == *ep.Zone
}

// auditWrites reads the writes to named objects that succeeded from the
// audit log at path, in the order they completed.
func auditWrites(t *testing.T, path string) []auditEvent {
	t.Helper()
	return slices.DeleteFunc(auditAnswers(t, path), func(ev auditEvent) bool { return ev.ResponseStatus.Code >= 300 })
}

// auditAnswers reads every answered request to a named object from the
// audit log at path, in the order they completed.
func auditAnswers(t *testing.T, path string) []auditEvent {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var events []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit log line: %v", err)
		}
		if ev.ObjectRef != nil && ev.ResponseStatus != nil {
			events = append(events, ev)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].Done.Before(&events[j].Done) })
	return events
}

// writesChecked counts what checkNoOverlappingWriters checked: writes to
// member and merged objects, and the holder changes of fences and of the
// leader Lease.
type writesChecked struct{ member, merged, fenceChanges, leaderChanges int }

// checkNoOverlappingWriters reads the hub's audit log and fails the test
// for any write to a member's hub objects (its per-cluster Service and
// Endpoints, its MCS slices) by a replica that was not the holder of the
// member's fence when the write arrived: the holder set by the last fence
// write that completed before it; and for any write to the merged objects
// (the ServiceImport, the derived Service) by one that did not hold the
// leader Lease then. Identities are the API server's users, tied to the
// replicas' identities by the peer Leases they wrote.
func checkNoOverlappingWriters(t *testing.T, path string, clusters []string) (w writesChecked) {
	t.Helper()
	events := auditWrites(t, path)
	identityOf := map[string]string{} // API server user → replica identity
	owner := map[string]string{}      // hub object → its member, or merged
	fences := map[string]string{}     // fence Lease → its member, or merged
	const merged = "(merged)"         // not a member name
	fences[leaderLeaseName] = merged
	owner["serviceimports/cart"], owner["services/"+endpoints.DerivedServiceName(appNamespace, "cart")] = merged, merged
	for _, c := range clusters {
		fences[shard.FenceName(c)] = c
		name, _ := endpoints.PerClusterName("cart", c)
		owner["services/"+name], owner["endpoints/"+name] = c, c
		for i := range 4 {
			owner["endpointslices/"+endpoints.SliceName(appNamespace, "cart", c, i)] = c
		}
	}
	for _, ev := range events {
		if ev.ObjectRef.Resource == "leases" && ev.RequestObject != nil && ev.RequestObject.Spec.HolderIdentity != nil {
			if id := *ev.RequestObject.Spec.HolderIdentity; shard.PeerName(id) == ev.ObjectRef.Name {
				identityOf[ev.User.Username] = id
			}
		}
	}
	type change struct {
		at     metav1.MicroTime
		holder string
	}
	history := map[string][]change{}
	for _, ev := range events {
		if c, ok := fences[ev.ObjectRef.Name]; ok && ev.ObjectRef.Resource == "leases" {
			holder := ""
			if ev.Verb != "delete" && ev.RequestObject != nil && ev.RequestObject.Spec.HolderIdentity != nil {
				holder = *ev.RequestObject.Spec.HolderIdentity
			}
			h := history[c]
			if len(h) == 0 || h[len(h)-1].holder != holder {
				if c == merged {
					w.leaderChanges++
				} else {
					w.fenceChanges++
				}
			}
			history[c] = append(h, change{ev.Done, holder})
		}
	}
	for _, ev := range events {
		c, ok := owner[ev.ObjectRef.Resource+"/"+ev.ObjectRef.Name]
		if !ok || ev.ObjectRef.Namespace != appNamespace {
			continue
		}
		writer, isReplica := identityOf[ev.User.Username]
		if !isReplica {
			continue // a test client
		}
		if c == merged {
			w.merged++
		} else {
			w.member++
		}
		holder := ""
		for _, ch := range history[c] {
			if !ch.at.Before(&ev.Received) {
				break
			}
			holder = ch.holder
		}
		if holder != writer {
			t.Errorf("%s %s/%s of member %s by %s (%s) at %s, while its fence named %q",
				ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Name, c, ev.User.Username, writer, ev.Received.Format(time.RFC3339Nano), holder)
		}
	}
	return w
}
