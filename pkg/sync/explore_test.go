package sync

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

var (
	exploreSeed  = flag.Int64("seed", -1, "TestExploreOrders: replay only this seed, logging every step")
	exploreSeeds = flag.Int("seeds", 500, "TestExploreOrders: how many seeds to explore")
)

// TestExploreOrders drives the controller through orders a seeded scheduler
// picks: member first syncs (some past their timeout), member and hub watch
// events (delayed, interleaved, echoes racing their write, dropped and
// relisted), write failures (409, 500, timeouts applied or not), startup
// with a stale hub, foreign objects, hub objects edited by someone else and
// member changes at any time; member faults (explore_faults_test.go) and
// handovers between replicas (explore_replicas_test.go); in a sixth of the
// seeds, replicas that share the members through the real shard coordinator
// (explore_shard_test.go), whose every write an oracle holds to the Leases
// the hub holds at that moment. At every step,
// a member registered but not connected keeps its exports in the hub until
// its withdraw period passes. At quiescence, for every seed:
//   - the hub holds exactly what package endpoints computes from the members'
//     final state (computed here, not by the controller);
//   - every member ServiceExport carries the conditions package endpoints
//     computes from that export and the expected import;
//   - no foreign object was touched;
//   - no replica keeps or reports per-member state (its store, its
//     cluster-labelled series) of a member it does not hold, or that is
//     no longer registered (explore_reports_test.go);
//   - one more full resync (of every replica, when sharded) writes nothing.
func TestExploreOrders(t *testing.T) {
	if *exploreSeed >= 0 {
		tally, err := explore(*exploreSeed, t.Logf)
		t.Logf("faults fired: %v", tally)
		if err != nil {
			t.Fatalf("seed %d: %v", *exploreSeed, err)
		}
		return
	}
	if *exploreSeeds <= 0 {
		t.Fatalf("-seeds %d: the explorer explores nothing", *exploreSeeds)
	}
	var failed []int64
	var first error
	total := map[string]int{}
	for seed := int64(0); seed < int64(*exploreSeeds); seed++ {
		tally, err := explore(seed, nil)
		for class, n := range tally {
			total[class] += n
		}
		if err != nil {
			if first == nil {
				first = fmt.Errorf("seed %d: %w", seed, err)
			}
			failed = append(failed, seed)
		}
	}
	t.Logf("fault classes and paths taken across %d seeds:", *exploreSeeds)
	for _, class := range faultClasses {
		t.Logf("  %-58s %d", class, total[class])
		if total[class] == 0 {
			t.Errorf("fault class %q never fired across %d seeds", class, *exploreSeeds)
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d seeds failed; the first: %v\nreplay one with: go test ./pkg/sync -run 'TestExploreOrders$' -v -seed %d\nfailing seeds: %v",
			len(failed), *exploreSeeds, first, failed[0], failed)
	}
}

// The explorer's ClusterSet: its members, namespaces and services.
var (
	simClusters   = []string{"east", "west", "north"}
	simNamespaces = []string{"shop", "late"}
	simServices   = []string{"db", "cart", "web"}
)

// world is one seed's run. Its replica is the one that leads (sharded:
// the first running; the sim fences say who merges); others holds the
// replicas that stand by, still write after losing the lead, or share the
// members.
type world struct {
	// replica is the replica the steps act on: the leader, or another
	// for a moment (as).
	*replica
	leader  *replica
	others  []*replica
	rng     *rand.Rand
	logf    func(string, ...interface{})
	now     time.Time
	ctx     context.Context
	srv     *simServer
	members *simMembers
	order   []string // member names
	// opts are the controllers' options; hub and hubMCS their clients.
	opts      Options
	hub       *kubefake.Clientset
	hubMCS    *mcsfake.Clientset
	replicas  int // replicas started so far, for their names
	handovers int // handovers left
	script    []step
	faults    bool
	breaks    int // watch breaks left
	// foreign holds the resourceVersion of every foreign hub object.
	foreign map[string]string
	steps   int
	// current is the worker running now; nil while the world runs.
	current *simWorker
	// clock times the unreachable policy; tally counts the member faults
	// that fired.
	clock *simClock
	tally map[string]int
	// disconnected holds the members registered but not connected, with
	// the services the hub recorded for each then, and since when.
	disconnected map[string]*simMember
	keptRecords  map[string][]string
	keptSince    map[string]time.Time
	// shard is the sharding of a sharded seed; nil otherwise.
	shard *shardWorld
}

type step struct {
	name string
	do   func()
}

func (w *world) log(format string, args ...interface{}) {
	if w.logf != nil {
		w.logf("%5d %8s  %s", w.steps, w.now.Sub(simEpoch).Round(time.Millisecond), fmt.Sprintf(format, args...))
	}
}

var simEpoch = time.Unix(100000, 0)

// simSyncTimeout is the members' first-sync timeout.
const simSyncTimeout = 30 * time.Second

func init() {
	// The controller logs every conflict and retry; the explorer makes many.
	klog.SetOutput(discard{})
	klog.LogToStderr(false)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func explore(seed int64, logf func(string, ...interface{})) (map[string]int, error) {
	w, err := newWorld(seed, logf)
	if err != nil {
		return nil, err
	}
	defer w.stopWorkers()
	if err := w.run(20000); err != nil {
		return w.tally, err
	}
	if err := w.check(); err != nil {
		return w.tally, err
	}
	if err := w.checkModel(); err != nil {
		return w.tally, err
	}
	if err := w.checkReports(); err != nil {
		return w.tally, err
	}
	// One more full resync, without faults: it must write nothing.
	before := w.srv.changes
	w.log("full resync")
	resync := []*replica{w.replica}
	if w.shard != nil {
		resync = w.replicaList()
	}
	for _, r := range resync {
		for _, name := range w.order {
			r.ctrl.ClusterSynced(name)
		}
		r.ctrl.enqueueHubObjects(labels.Everything())
	}
	if err := w.run(20000); err != nil {
		return w.tally, err
	}
	if n := w.srv.changes - before; n > 0 {
		return w.tally, fmt.Errorf("a full resync of a converged hub wrote %d times", n)
	}
	if err := w.check(); err != nil {
		return w.tally, err
	}
	return w.tally, w.checkReports()
}

func newWorld(seed int64, logf func(string, ...interface{})) (*world, error) {
	rng := rand.New(rand.NewSource(seed))
	w := &world{
		rng: rng, logf: logf, now: simEpoch, ctx: context.Background(),
		srv:    newSimServer(),
		faults: rng.Intn(4) > 0, breaks: rng.Intn(3), foreign: map[string]string{},
		tally: map[string]int{}, disconnected: map[string]*simMember{}, keptRecords: map[string][]string{}, keptSince: map[string]time.Time{},
	}
	switch rng.Intn(6) {
	case 0:
		w.shard = newShardWorld(1 + rng.Intn(5))
	case 1, 2, 3:
		w.handovers = 1 + rng.Intn(3)
	}
	w.clock = &simClock{w: w}
	w.hub = kubefake.NewClientset()
	w.hubMCS = mcsfake.NewSimpleClientset()
	w.hub.PrependReactor("*", "*", w.srv.react)
	w.hubMCS.PrependReactor("*", "*", w.srv.react)
	if w.shard != nil {
		w.hub.PrependReactor("*", "*", w.audit)
		w.hubMCS.PrependReactor("*", "*", w.audit)
	}
	w.srv.watch = func(ev hubEvent) {
		for _, r := range w.replicaList() {
			if !r.broken[ev.resource] {
				r.hubEvents[ev.resource] = append(r.hubEvents[ev.resource], ev)
			}
		}
	}
	w.srv.fault = w.fault
	if logf != nil {
		w.srv.logf = w.log
	}
	w.srv.during = w.during

	n := 2 + rng.Intn(2)
	w.members = &simMembers{members: map[string]*simMember{}}
	for _, name := range simClusters[:n] {
		m := newSimMember(name)
		// Most members list at once; some take a while, and some longer
		// than their sync timeout.
		switch rng.Intn(4) {
		case 0:
			m.listAt = simEpoch.Add(time.Duration(rng.Intn(int(simSyncTimeout))))
		case 1:
			m.listAt = simEpoch.Add(simSyncTimeout + time.Duration(rng.Intn(int(simSyncTimeout))))
		}
		m.statusFault = func() error { return w.statusConflict(m.name) }
		w.members.members[name] = m
		w.order = append(w.order, name)
	}
	policy := simPolicies[rng.Intn(len(simPolicies))]
	w.opts = Options{
		Workers: 1,
		Export:  ExportPolicy{Mode: ExportServiceExport, Exclude: sets.New(DefaultExcludedNamespaces...)},
		// Some runs write no ServiceExport conditions, so that nothing
		// else queues the member keys that read an import.
		WriteExportStatus:   rng.Intn(4) != 0,
		UnreachableGrace:    policy.grace,
		UnreachableWithdraw: policy.withdraw,
		Clock:               w.clock,
		HubMetadata:         metadataOf(w.hub),
	}
	// In some runs the hub is member east, its Nodes in zones, and some
	// or all imports prefer its endpoints.
	if rng.Intn(2) == 0 {
		w.opts.HubCluster, w.opts.PreferLocal = "east", rng.Intn(2) == 0
		for i := rng.Intn(3); i >= 0; i-- {
			w.srv.seed(resourceNode, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i),
				Labels: simNodeZone(rng)}})
		}
	}
	first, err := w.newReplica()
	if err != nil {
		return nil, err
	}
	w.replica, w.leader = first, first
	if w.handovers > 0 {
		// A warm standby, from the start.
		standby, err := w.newReplica()
		if err != nil {
			return nil, err
		}
		w.others = append(w.others, standby)
	}
	if w.shard != nil {
		if err := w.startShard(); err != nil {
			return nil, err
		}
	}

	// The hub: its namespaces, perhaps what an earlier run left (for the
	// members as they were then, and for a member since unregistered), and
	// objects of others, some holding names the daemon wants.
	w.srv.seed(resourceNamespace, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}})
	if rng.Intn(3) == 0 {
		w.srv.seed(resourceNamespace, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "late"}})
	}
	if rng.Intn(2) == 0 {
		earlier := map[string]*simMember{}
		for _, name := range append(append([]string(nil), w.order...), "gone") {
			m := newSimMember(name)
			w.fillMember(m)
			earlier[name] = m
		}
		w.seedHub(earlier)
	}
	if rng.Intn(3) == 0 {
		svc, cluster := simServices[rng.Intn(len(simServices))], w.order[rng.Intn(len(w.order))]
		name, _ := endpoints.PerClusterName(svc, cluster)
		w.seedForeign(resourceService, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}})
	}
	if rng.Intn(4) == 0 {
		w.seedForeign(resourceServiceImport, &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: simServices[rng.Intn(len(simServices))]},
			Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP}})
	}

	// The members as they are at start, and what happens to them later.
	for _, name := range w.order {
		w.fillMember(w.members.members[name])
	}
	for i := rng.Intn(8); i > 0; i-- {
		w.script = append(w.script, w.randomChange())
	}
	return w, nil
}

func (w *world) seedForeign(resource string, obj runtime.Object) {
	stored := w.srv.seed(resource, obj)
	m, _ := metaOf(stored)
	w.foreign[resource+"/"+objKey(m)] = m.GetResourceVersion()
}

// simNodeZone is the labels of a hub Node: in zone z1 or z2, or in none.
func simNodeZone(rng *rand.Rand) map[string]string {
	if z := rng.Intn(3); z > 0 {
		return map[string]string{corev1.LabelTopologyZone: fmt.Sprintf("z%d", z)}
	}
	return nil
}

// hubZones are the zones of the hub's Nodes, sorted.
func (w *world) hubZones() []string {
	var zones []string
	for _, o := range w.srv.list(resourceNode) {
		if z := o.(*corev1.Node).Labels[corev1.LabelTopologyZone]; z != "" && !slices.Contains(zones, z) {
			zones = append(zones, z)
		}
	}
	slices.Sort(zones)
	return zones
}

// fillMember gives a member a random set of services, exports and
// endpoints.
func (w *world) fillMember(m *simMember) {
	for _, ns := range simNamespaces {
		for _, name := range simServices {
			if w.rng.Intn(5) < 3 {
				w.putService(m, ns, name)
				if w.rng.Intn(4) < 3 {
					w.putExport(m, ns, name)
				}
			} else if w.rng.Intn(10) == 0 {
				w.putExport(m, ns, name) // an export without its service
			}
		}
	}
}

// simPortSets are the port sets members give a service: some agree, some
// conflict.
var simPortSets = [][]corev1.ServicePort{
	{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
	{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
	{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}},
	{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}, {Name: "grpc", Port: 9090, Protocol: corev1.ProtocolTCP}},
}

func (w *world) putService(m *simMember, ns, name string) {
	ports := simPortSets[w.rng.Intn(len(simPortSets))]
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: k8stypes.UID("member-" + m.name + "-" + ns + "-" + name),
			CreationTimestamp: metav1.NewTime(simEpoch.Add(-time.Duration(w.rng.Intn(3)) * time.Hour))},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.10", Ports: ports},
	}
	if name == "db" {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	if w.rng.Intn(3) == 0 {
		svc.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferSameZone)
	}
	if v := w.rng.Intn(6); v < 2 {
		svc.Annotations = map[string]string{endpoints.AnnotationPreferLocal: strconv.FormatBool(v == 0)}
	}
	m.set(kindService, ns+"/"+name, svc)
	w.putEndpoints(m, ns, name, ports)
}

// putEndpoints replaces the member's slices of a service: up to two slices
// of up to three endpoints, some not ready.
func (w *world) putEndpoints(m *simMember, ns, name string, ports []corev1.ServicePort) {
	for _, s := range m.truthSlices(ns, name) {
		m.set(kindSlice, ns+"/"+s.Name, nil)
	}
	idx := 0
	for _, c := range simClusters {
		if c == m.name {
			break
		}
		idx++
	}
	for i := w.rng.Intn(3); i > 0; i-- {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", name, i), Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
		for _, p := range ports {
			s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Port: ptr.To(p.Port + 8000), Protocol: ptr.To(corev1.ProtocolTCP)})
		}
		for j := w.rng.Intn(4); j > 0; j-- {
			ready := w.rng.Intn(3) > 0
			ep := discoveryv1.Endpoint{
				Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", idx+1, i, w.rng.Intn(250)+1)},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(false)},
				// The member's own hints, which never reach the hub.
				Hints: &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z9"}}},
			}
			// Most endpoints have a zone; one without leaves the service
			// unhinted in every cluster.
			if z := w.rng.Intn(8); z > 0 {
				ep.Zone = ptr.To(fmt.Sprintf("z%d", z%2+1))
			}
			s.Endpoints = append(s.Endpoints, ep)
		}
		m.set(kindSlice, ns+"/"+s.Name, s)
	}
}

func (w *world) putExport(m *simMember, ns, name string) {
	m.set(kindExport, ns+"/"+name, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		UID: k8stypes.UID(fmt.Sprintf("export-%s-%s-%s-%d", m.name, ns, name, w.steps)), Generation: 1,
		CreationTimestamp: metav1.NewTime(simEpoch.Add(-time.Duration(w.rng.Intn(3)) * time.Minute))}})
}

// toggleZone gives one endpoint of a member's service a zone, or takes its
// zone away: whether every ready endpoint of a service has a zone decides
// the hints of every cluster's hub slices.
func (w *world) toggleZone(m *simMember, ns, name string) {
	list := m.truthSlices(ns, name)
	if len(list) == 0 {
		return
	}
	s := list[w.rng.Intn(len(list))].DeepCopy()
	if len(s.Endpoints) == 0 {
		return
	}
	ep := &s.Endpoints[w.rng.Intn(len(s.Endpoints))]
	if ep.Zone != nil {
		ep.Zone = nil
	} else {
		ep.Zone = ptr.To("z1")
	}
	m.set(kindSlice, ns+"/"+s.Name, s)
}

// randomChange is one later change: to a member, to the hub's namespaces,
// or to one of the daemon's hub objects by someone else.
func (w *world) randomChange() step {
	m := w.members.members[w.order[w.rng.Intn(len(w.order))]]
	ns, name := simNamespaces[w.rng.Intn(len(simNamespaces))], simServices[w.rng.Intn(len(simServices))]
	switch w.rng.Intn(8) {
	case 0:
		return step{fmt.Sprintf("%s: service %s/%s created or deleted", m.name, ns, name), func() {
			if m.truthService(ns, name) != nil {
				m.set(kindService, ns+"/"+name, nil)
			} else {
				w.putService(m, ns, name)
			}
		}}
	case 1:
		return step{fmt.Sprintf("%s: export %s/%s created or deleted", m.name, ns, name), func() {
			if m.truthExport(ns, name) != nil {
				m.set(kindExport, ns+"/"+name, nil)
			} else {
				w.putExport(m, ns, name)
			}
		}}
	case 2:
		if w.rng.Intn(2) == 0 {
			return step{fmt.Sprintf("%s: an endpoint of %s/%s gains or loses its zone", m.name, ns, name), func() { w.toggleZone(m, ns, name) }}
		}
		return step{fmt.Sprintf("%s: endpoints of %s/%s changed", m.name, ns, name), func() {
			if svc := m.truthService(ns, name); svc != nil {
				w.putEndpoints(m, ns, name, svc.Spec.Ports)
			}
		}}
	case 3:
		return step{fmt.Sprintf("%s: service %s/%s replaced with new ports", m.name, ns, name), func() {
			if m.truthService(ns, name) != nil {
				w.putService(m, ns, name)
			}
		}}
	case 4:
		if w.opts.HubCluster != "" && w.rng.Intn(2) == 0 {
			return step{"hub: a Node changes zone", w.moveNode}
		}
		return step{"hub: namespace late created", func() {
			if _, ok := w.srv.get(resourceNamespace, "", "late"); !ok {
				_, _ = w.srv.create(corev1.Resource("namespaces"), resourceNamespace, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "late"}})
			}
		}}
	case 5:
		return step{fmt.Sprintf("%s: unregistered", m.name), func() { w.unregister(m.name) }}
	case 6:
		return step{"hub: someone else deletes their object that holds a name the daemon wants", w.dropForeign}
	}
	return step{"hub: someone else edits or deletes one of the daemon's objects", w.tamper}
}

// moveNode puts one of the hub's Nodes in another zone, or in none.
func (w *world) moveNode() {
	nodes := w.srv.list(resourceNode)
	if len(nodes) == 0 {
		return
	}
	n := nodes[w.rng.Intn(len(nodes))].DeepCopyObject().(*corev1.Node)
	n.Labels = simNodeZone(w.rng)
	_, _ = w.srv.update(corev1.Resource("nodes"), resourceNode, n, false)
}

// unregister removes a member, as deleting its Secret does: its informers
// stop, and the controller is told once it is gone. The last member stays.
func (w *world) unregister(name string) {
	if _, ok := w.members.members[name]; !ok || len(w.order) < 2 {
		return
	}
	delete(w.members.members, name)
	w.order = slices.DeleteFunc(w.order, func(n string) bool { return n == name })
	w.eachCtrl(func(c *Controller) { c.ClusterRemoved(name) })
	if w.shard != nil {
		w.shardUnregistered(name)
	}
}

// dropForeign deletes one foreign object: the name it held is free for the
// daemon, which must notice without an event of its own caches.
func (w *world) dropForeign() {
	refs := make([]string, 0, len(w.foreign))
	for ref := range w.foreign {
		refs = append(refs, ref)
	}
	if len(refs) == 0 {
		return
	}
	sort.Strings(refs)
	ref := refs[w.rng.Intn(len(refs))]
	resource, key, _ := strings.Cut(ref, "/")
	ns, name, _ := strings.Cut(key, "/")
	w.log("foreign %s deleted", ref)
	delete(w.foreign, ref)
	_ = w.srv.delete(schema.GroupResource{Resource: resource}, resource, ns, name, metav1.DeleteOptions{})
}

// tamper edits or deletes one of the daemon's hub objects, as a person or
// another controller might.
func (w *world) tamper() {
	var refs []string
	for _, r := range []string{resourceService, resourceEndpoints, resourceEndpointSlice, resourceServiceImport} {
		for _, o := range w.srv.list(r) {
			if watched(r, o) {
				m, _ := metaOf(o)
				refs = append(refs, r+" "+objKey(m))
			}
		}
	}
	if len(refs) == 0 {
		return
	}
	ref := refs[w.rng.Intn(len(refs))]
	resource, key, _ := strings.Cut(ref, " ")
	ns, name, _ := strings.Cut(key, "/")
	obj, _ := w.srv.get(resource, ns, name)
	gr := schema.GroupResource{Resource: resource}
	if w.rng.Intn(2) == 0 {
		w.log("tamper: delete %s", ref)
		_ = w.srv.delete(gr, resource, ns, name, metav1.DeleteOptions{})
		w.forgetKept(obj)
		return
	}
	w.log("tamper: edit %s", ref)
	switch o := obj.(type) {
	case *corev1.Service:
		o.Spec.Ports = append(o.Spec.Ports, corev1.ServicePort{Name: "intruder", Port: 1, Protocol: corev1.ProtocolTCP})
	case *corev1.Endpoints:
		o.Subsets = nil
	case *discoveryv1.EndpointSlice:
		o.Endpoints = nil
	case *mcsv1beta1.ServiceImport:
		o.Spec.Ports = nil
	}
	_, _ = w.srv.update(gr, resource, obj, false)
}

// seedHub stores what the daemon would have written for earlier member
// states, as a run before a restart left it.
func (w *world) seedHub(earlier map[string]*simMember) {
	want := expectedHub(earlier, func(ns string) bool { _, ok := w.srv.get(resourceNamespace, "", ns); return ok }, nil,
		simLocality{hubCluster: w.opts.HubCluster, preferLocal: w.opts.PreferLocal, zones: w.hubZones()})
	for _, o := range want.perCluster {
		w.srv.seed(resourceService, o.svc)
		w.srv.seed(resourceEndpoints, o.eps)
		for _, s := range o.slices {
			w.srv.seed(resourceEndpointSlice, s)
		}
	}
	for _, imp := range want.imports {
		stored := w.srv.seed(resourceServiceImport, imp.imp).(*mcsv1beta1.ServiceImport)
		svc := endpoints.DerivedService(imp.imp)
		svc.OwnerReferences = []metav1.OwnerReference{endpoints.ImportOwner(stored)}
		if imp.imp.Spec.Type != mcsv1beta1.Headless {
			w.srv.nextIP++
			svc.Spec.ClusterIP = fmt.Sprintf("10.96.200.%d", w.srv.nextIP%250+1)
			svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
			stored.Spec.IPs = svc.Spec.ClusterIPs
			w.srv.objects[resourceServiceImport][objKey(stored)] = stored
		}
		w.srv.seed(resourceService, svc)
	}
}

// fault picks the fate of one write while faults are on.
func (w *world) fault(verb, resource string) (error, bool) {
	if !w.faults || w.rng.Intn(12) > 0 {
		return nil, false
	}
	gr := schema.GroupResource{Resource: resource}
	switch w.rng.Intn(4) {
	case 0:
		if verb == verbUpdate || verb == verbUpdateStatus {
			w.log("fault: 409 on %s %s", verb, resource)
			return apierrors.NewConflict(gr, "", fmt.Errorf("injected")), false
		}
		fallthrough
	case 1:
		w.log("fault: 500 on %s %s", verb, resource)
		return apierrors.NewInternalError(fmt.Errorf("injected")), false
	case 2:
		w.log("fault: timeout on %s %s, not applied", verb, resource)
		return fmt.Errorf("injected: %w", context.DeadlineExceeded), false
	}
	w.log("fault: timeout on %s %s, applied", verb, resource)
	return apierrors.NewTimeoutError("injected", 1), true
}

// during runs while a write's response is on its way: its echo, and other
// hub events, may arrive first.
func (w *world) during() {
	if w.rng.Intn(3) > 0 {
		return
	}
	for _, r := range sortedResources(w.hubEvents) {
		for len(w.hubEvents[r]) > 0 && w.rng.Intn(2) == 0 {
			w.deliverHub(r)
		}
	}
}

// run takes steps until nothing is left to do but timers far ahead.
func (w *world) run(limit int) error {
	idle := w.now // when the last step that made progress ran
	for ; limit > 0; limit-- {
		w.steps++
		for _, r := range w.replicaList() {
			r.queue.release()
		}
		steps := w.enabled()
		if w.shard != nil && len(steps) > 0 && w.shardUpkeepOnly(steps) {
			// Sharded replicas renew their Leases forever: the run is
			// quiet once nothing else is due for long.
			if due, ok := w.nextDue(); !ok || due.Sub(idle) > 11*time.Minute {
				if w.flushKicks() && !w.shardUpkeepOnly(w.enabled()) {
					continue // the reconciles owed left work
				}
				return w.quiescent()
			}
		}
		if len(steps) == 0 {
			due, ok := w.nextDue()
			if w.shard != nil {
				if at, has := w.shardDue(); has && (!ok || at.Before(due)) {
					due, ok = at, true
				}
			}
			if !ok || due.Sub(idle) > 11*time.Minute {
				return w.quiescent()
			}
			w.now = due
			w.expireWrites()
			continue
		}
		s := steps[w.rng.Intn(len(steps))]
		clock, sync, upkeep := strings.HasPrefix(s.name, "clock"), s.name == "sync", isUpkeep(s.name)
		if !clock && !sync {
			w.log("%s", s.name)
		}
		changes := w.srv.changes
		s.do()
		if err := w.checkKept(); err != nil {
			return err
		}
		if w.shard != nil {
			w.checkOwners()
			if w.shard.err != nil {
				return w.shard.err
			}
		}
		// A sync that changed nothing (a key parked on a name conflict,
		// retried now and then) is no progress; nor is the upkeep of
		// Leases.
		if !clock && !upkeep && (!sync || w.srv.changes != changes) {
			idle = w.now
		}
	}
	err := fmt.Errorf("no quiescence after %d steps (queue %d, delayed %d)", w.steps, w.queue.Len(), len(w.queue.delayed))
	if w.shard != nil {
		err = fmt.Errorf("%w; sharding: %v", err, w.shardSettled())
	}
	return err
}

// nextDue is the next time something is due: a delayed key, or a member's
// first sync or sync timeout.
func (w *world) nextDue() (time.Time, bool) {
	var due time.Time
	ok := false
	for _, r := range w.replicaList() {
		if at, has := r.queue.nextDue(); has && (!ok || at.Before(due)) {
			due, ok = at, true
		}
		for _, o := range r.ctrl.written.overlay {
			if at := o.at.Add(writtenTTL + time.Millisecond); !ok || at.Before(due) {
				due, ok = at, true
			}
		}
	}
	if at, has := w.clock.next(); has && (!ok || at.Before(due)) {
		due, ok = at, true
	}
	for _, name := range w.order {
		m := w.members.members[name]
		if m.listed {
			continue
		}
		for _, at := range []time.Time{m.listAt, simEpoch.Add(simSyncTimeout)} {
			if at.After(w.now) && (!ok || at.Before(due)) {
				due, ok = at, true
			}
		}
	}
	return due, ok
}

func (w *world) quiescent() error {
	if n := w.parkedWorkers(); n > 0 {
		return fmt.Errorf("quiescent with %d workers in the middle of a sync", n)
	}
	for _, r := range w.others {
		if r.stale {
			return fmt.Errorf("quiescent with replica %s still writing", r.name)
		}
	}
	for _, name := range w.order {
		if m := w.members.members[name]; !m.listed || len(m.pending) > 0 {
			return fmt.Errorf("quiescent with member %s not caught up", name)
		}
	}
	if w.shard != nil {
		return w.shardQuiescent()
	}
	return nil
}

// enabled lists the steps that can be taken now.
func (w *world) enabled() []step {
	var out []step
	if !w.hubListed {
		out = append(out, step{"hub caches list", w.listHub})
	}
	for _, name := range w.order {
		m := w.members.members[name]
		if !m.listed && !w.now.Before(m.listAt) {
			out = append(out, step{name + ": first sync", func() { m.list(); w.eachCtrl(func(c *Controller) { c.ClusterSynced(m.name) }) }})
		}
		if !m.listed && !m.timedOut && !w.now.Before(simEpoch.Add(simSyncTimeout)) {
			out = append(out, step{name + ": sync timeout", func() { m.timedOut = true; w.eachCtrl(func(c *Controller) { c.ClusterSyncTimedOut(m.name) }) }})
		}
		if len(m.pending) > 0 && !m.down && !m.broken {
			out = append(out, step{name + ": member event", func() {
				ev := m.pending[0]
				m.pending = m.pending[1:]
				m.deliver(ev, false)
			}})
		}
	}
	out = append(out, w.memberRecoveries()...)
	out = append(out, w.replicaSteps()...)
	if w.shard != nil {
		out = append(out, w.shardSteps()...)
	}
	if w.started {
		out = append(out, w.memberFaults()...)
	}
	if !w.members.synced {
		out = append(out, step{"registrations synced", func() { w.members.synced = true }})
	}
	if !w.started && w.hubListed && w.members.synced {
		out = append(out, step{"controller starts", func() { w.started = true; w.ctrl.begin() }})
	}
	for _, r := range sortedResources(w.hubEvents) {
		if len(w.hubEvents[r]) > 0 && w.hubListed {
			out = append(out, step{"hub event " + r, func() { w.deliverHub(r) }})
			if w.faults && w.breaks > 0 {
				out = append(out, step{"hub watch breaks: " + r, func() {
					w.breaks--
					w.broken[r] = true
					w.hubEvents[r] = nil
				}})
			}
		}
	}
	for r := range w.broken {
		if w.broken[r] {
			out = append(out, step{"hub relist " + r, func() { w.relist(r) }})
		}
	}
	if w.started {
		out = append(out, w.workerSteps(w.replica)...)
	}
	if len(w.script) > 0 {
		out = append(out, step{"change: " + w.script[0].name, func() {
			s := w.script[0]
			w.script = w.script[1:]
			s.do()
		}})
	} else if w.faults && w.rng.Intn(20) == 0 {
		out = append(out, step{"faults end", func() { w.faults = false }})
	}
	if w.hubListed && w.srv.hasGarbage() {
		out = append(out, step{"hub garbage collector", func() { w.srv.collectGarbage() }})
	}
	if len(out) > 0 {
		// Time passes between any two steps; now and then long enough for
		// the write overlay to expire.
		out = append(out, step{"clock +50ms", func() { w.now = w.now.Add(50 * time.Millisecond); w.expireWrites() }})
		if w.shard != nil {
			// Sharded replicas renew every few seconds: time goes on in
			// steps they can keep up with.
			out = append(out, step{"clock +1s", func() { w.now = w.now.Add(time.Second); w.expireWrites() }})
		} else if w.rng.Intn(10) == 0 {
			out = append(out, step{"clock +61s", func() { w.now = w.now.Add(61 * time.Second); w.expireWrites() }})
		}
	}
	return out
}

func sortedResources(m map[string][]hubEvent) []string {
	out := make([]string, 0, len(m))
	for r := range m {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// listHub fills the hub caches, as the informers' first list does.
func (w *world) listHub() {
	w.hubListed = true
	w.hubEvents = map[string][]hubEvent{}
	resources := []string{resourceNamespace, resourceService, resourceEndpoints, resourceEndpointSlice, resourceServiceImport}
	if w.ctrl.caches.nodeInf != nil {
		resources = append(resources, resourceNode)
	}
	for _, r := range resources {
		for _, o := range w.srv.list(r) {
			if watched(r, o) {
				obj, _ := stripHubObject(o)
				_ = w.indexer(r).Add(obj)
				w.hubHandler(r).OnAdd(obj, true)
			}
		}
	}
}

func (w *world) indexer(resource string) cache.Indexer {
	switch resource {
	case resourceService:
		return w.ctrl.caches.serviceInf.GetIndexer()
	case resourceEndpoints:
		return w.ctrl.caches.endpointInf.GetIndexer()
	case resourceEndpointSlice:
		return w.ctrl.caches.sliceInf.GetIndexer()
	case resourceServiceImport:
		return w.ctrl.caches.importInf.GetIndexer()
	case resourceNode:
		return w.ctrl.caches.nodeInf.GetIndexer()
	}
	return w.ctrl.caches.nsInf.GetIndexer()
}

func (w *world) hubHandler(resource string) cache.ResourceEventHandler {
	switch resource {
	case resourceNamespace:
		return cache.ResourceEventHandlerFuncs{AddFunc: w.ctrl.namespaceAdded}
	case resourceNode:
		return w.ctrl.nodeHandler()
	}
	return w.ctrl.hubHandler(resource)
}

// deliverHub delivers the oldest pending event of one hub watch.
func (w *world) deliverHub(resource string) {
	ev := w.hubEvents[resource][0]
	w.hubEvents[resource] = w.hubEvents[resource][1:]
	obj, _ := stripHubObject(ev.obj)
	idx, h := w.indexer(resource), w.hubHandler(resource)
	key, _ := cache.MetaNamespaceKeyFunc(obj)
	old, had, _ := idx.GetByKey(key)
	switch {
	case ev.gone:
		_ = idx.Delete(obj)
		h.OnDelete(obj)
	case had:
		_ = idx.Update(obj)
		h.OnUpdate(old, obj)
	default:
		_ = idx.Add(obj)
		h.OnAdd(obj, false)
	}
}

// relist brings a hub cache whose watch broke in line with the server, as a
// reflector's relist does: adds, updates, and deletions as tombstones.
func (w *world) relist(resource string) {
	w.broken[resource] = false
	idx, h := w.indexer(resource), w.hubHandler(resource)
	seen := map[string]bool{}
	for _, o := range w.srv.list(resource) {
		if !watched(resource, o) {
			continue
		}
		obj, _ := stripHubObject(o)
		key, _ := cache.MetaNamespaceKeyFunc(obj)
		seen[key] = true
		old, had, _ := idx.GetByKey(key)
		if had {
			om, _ := metaOf(old)
			nm, _ := metaOf(obj)
			_ = idx.Update(obj)
			if om.GetResourceVersion() != nm.GetResourceVersion() {
				h.OnUpdate(old, obj)
			}
			continue
		}
		_ = idx.Add(obj)
		h.OnAdd(obj, false)
	}
	for _, key := range idx.ListKeys() {
		if seen[key] {
			continue
		}
		old, _, _ := idx.GetByKey(key)
		_ = idx.Delete(old)
		h.OnDelete(cache.DeletedFinalStateUnknown{Key: key, Obj: old})
	}
}
