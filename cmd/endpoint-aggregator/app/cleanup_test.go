package app

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/daemonconfig"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

const cleanupNS = "endpoint-aggregator"

var cleanupNow = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

func cleanupMeta(ns, name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, UID: types.UID(ns + "/" + name)}
}

// cleanupHub is a hub with the daemon's output for shop/cart from east and
// west, and the objects cleanup must leave alone.
func cleanupHub() (kube []runtime.Object, mcs []runtime.Object) {
	ours := map[string]string{endpoints.LabelManagedBy: endpoints.ManagedByValue}
	perCluster := func(c string) map[string]string {
		return map[string]string{endpoints.LabelManagedBy: endpoints.ManagedByValue, endpoints.LabelServiceName: "cart", endpoints.LabelSourceCluster: c}
	}
	derived := endpoints.DerivedServiceName("shop", "cart")
	slice := func(name, c string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: cleanupMeta("shop", name, endpoints.SliceLabels("shop", "cart", c)), AddressType: discoveryv1.AddressTypeIPv4}
	}
	kube = []runtime.Object{
		slice("cart-east-abc", "east"),
		slice("cart-west-def", "west"),
		// Mirrored by the hub from our Endpoints: it copies our labels but
		// is the mirroring controller's.
		&discoveryv1.EndpointSlice{ObjectMeta: cleanupMeta("shop", "cart-east-mirror", map[string]string{
			endpoints.LabelManagedBy: endpoints.ManagedByValue, discoveryv1.LabelManagedBy: "endpointslicemirroring-controller.k8s.io",
			discoveryv1.LabelServiceName: "cart-east"}), AddressType: discoveryv1.AddressTypeIPv4},
		&corev1.Service{ObjectMeta: cleanupMeta("shop", derived, map[string]string{endpoints.LabelManagedBy: endpoints.ManagedByValue, mcsv1beta1.LabelServiceName: "cart"})},
		&corev1.Service{ObjectMeta: cleanupMeta("shop", "cart-east", perCluster("east"))},
		&corev1.Endpoints{ObjectMeta: cleanupMeta("shop", "cart-east", perCluster("east"))},
		// A user's own Service and Endpoints where west's would go.
		&corev1.Service{ObjectMeta: cleanupMeta("shop", "cart-west", map[string]string{"app": "cart"})},
		&corev1.Endpoints{ObjectMeta: cleanupMeta("shop", "cart-west", nil)},
		&corev1.Service{ObjectMeta: cleanupMeta("shop", "helm-thing", map[string]string{endpoints.LabelManagedBy: "Helm"})},
		&coordinationv1.Lease{ObjectMeta: cleanupMeta(cleanupNS, easync.MemberLeasePrefix+"east", map[string]string{endpoints.LabelManagedBy: endpoints.ManagedByValue, easync.LabelLeaseCluster: "east"}),
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("endpoint-aggregator"), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &metav1.MicroTime{Time: cleanupNow.Add(-time.Hour)}}},
		// Released by the leader on shutdown.
		&coordinationv1.Lease{ObjectMeta: cleanupMeta(cleanupNS, "endpoint-aggregator", nil),
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(""), LeaseDurationSeconds: ptr.To[int32](1), RenewTime: &metav1.MicroTime{Time: cleanupNow.Add(-time.Minute)}}},
		&coordinationv1.Lease{ObjectMeta: cleanupMeta(cleanupNS, "someone-elses", nil)},
		&corev1.Secret{ObjectMeta: cleanupMeta(cleanupNS, "east", map[string]string{clusters.LabelMemberCluster: clusters.MemberClusterValue})},
		cleanupPublished("endpoint-aggregator"),
	}
	mcs = []runtime.Object{
		&mcsv1beta1.ServiceImport{ObjectMeta: cleanupMeta("shop", "cart", ours)},
		&mcsv1beta1.ServiceImport{ObjectMeta: cleanupMeta("shop", "legacy", nil)},
	}
	return kube, mcs
}

// cleanupPublished is the configuration a daemon published, with its
// leader election Lease.
func cleanupPublished(leaderLease string) *corev1.ConfigMap {
	c := daemonconfig.Config{Version: "v1", Flags: map[string]string{"namespace": cleanupNS, "leader-election-id": leaderLease}}.ConfigMap(cleanupNS)
	c.UID = types.UID(cleanupNS + "/" + c.Name)
	return c
}

type cleanupFixture struct {
	kube *kubefake.Clientset
	mcs  *mcsfake.Clientset
	hub  *cliClients
	log  []string // the writes to both fakes, in order
}

func newCleanupFixture(kube, mcs []runtime.Object) *cleanupFixture {
	f := &cleanupFixture{kube: kubefake.NewClientset(kube...), mcs: mcsfake.NewSimpleClientset(mcs...)}
	f.hub = &cliClients{context: "hub", kube: f.kube, mcs: f.mcs}
	record := func(a k8stesting.Action) (bool, runtime.Object, error) {
		switch a := a.(type) {
		case k8stesting.DeleteAction:
			f.log = append(f.log, "delete "+a.GetResource().Resource+" "+a.GetNamespace()+"/"+a.GetName())
		case k8stesting.CreateAction, k8stesting.UpdateAction, k8stesting.PatchAction:
			f.log = append(f.log, a.GetVerb()+" "+a.GetResource().Resource)
		}
		return false, nil, nil
	}
	f.kube.PrependReactor("*", "*", record)
	f.mcs.PrependReactor("*", "*", record)
	return f
}

// writes returns "verb resource ns/name" of every mutating request, in order.
func (f *cleanupFixture) writes() []string { return f.log }

func (f *cleanupFixture) run(t *testing.T, o *cleanupOptions) (stdout, stderr string, err error) {
	t.Helper()
	if o.kube == nil {
		o.kube = newKubeFlags()
	}
	if o.Output == "" {
		o.Output = "table"
	}
	if o.now == nil {
		o.now = func() time.Time { return cleanupNow }
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err = o.cleanup(context.Background(), f.hub, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestCleanupDeletesOnlyLabelledObjectsEndpointsFirst(t *testing.T) {
	f := newCleanupFixture(cleanupHub())
	stdout, stderr, err := f.run(t, &cleanupOptions{HubContext: "hub", LeaderElectionID: "endpoint-aggregator"})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	t.Logf("stdout:\n%sstderr:\n%s", stdout, stderr)
	derived := endpoints.DerivedServiceName("shop", "cart")
	want := []string{
		"delete endpointslices shop/cart-east-abc",
		"delete endpointslices shop/cart-west-def",
		"delete endpoints shop/cart-east",
		"delete services shop/cart-east",
		"delete services shop/" + derived,
		"delete serviceimports shop/cart",
		"delete leases " + cleanupNS + "/endpoint-aggregator",
		"delete leases " + cleanupNS + "/" + easync.MemberLeasePrefix + "east",
		"delete configmaps " + cleanupNS + "/" + daemonconfig.Name,
	}
	if got := f.writes(); !slices.Equal(got, want) {
		t.Errorf("writes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	ctx := context.Background()
	for _, get := range []func() error{
		func() error {
			_, err := f.kube.CoreV1().Services("shop").Get(ctx, "cart-west", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := f.kube.CoreV1().Endpoints("shop").Get(ctx, "cart-west", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := f.kube.CoreV1().Services("shop").Get(ctx, "helm-thing", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := f.kube.DiscoveryV1().EndpointSlices("shop").Get(ctx, "cart-east-mirror", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := f.kube.CoordinationV1().Leases(cleanupNS).Get(ctx, "someone-elses", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := f.kube.CoreV1().Secrets(cleanupNS).Get(ctx, "east", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := f.mcs.MulticlusterV1beta1().ServiceImports("shop").Get(ctx, "legacy", metav1.GetOptions{})
			return err
		},
	} {
		if err := get(); err != nil {
			t.Errorf("an object cleanup must leave alone: %v", err)
		}
	}
	// Grouped by kind, in deletion order, with counts.
	var kinds []string
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n")[1:] {
		if k := strings.Fields(l)[0]; len(kinds) == 0 || kinds[len(kinds)-1] != k {
			kinds = append(kinds, k)
		}
	}
	if !slices.Equal(kinds, cleanupOrder) {
		t.Errorf("table kinds in order %v, want %v", kinds, cleanupOrder)
	}
	for _, s := range []string{"Deleted 2 EndpointSlices, 1 Endpoints, 2 Services, 1 ServiceImport, 2 Leases, 1 ConfigMap.", "registration Secrets", "--create-namespaces", "without the label app.kubernetes.io/managed-by=endpoint-aggregator"} {
		if !strings.Contains(stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, stderr)
		}
	}
	if !strings.Contains(stdout, "leader election   deleted") {
		t.Errorf("table does not name the leader election Lease:\n%s", stdout)
	}

	// Again: nothing left, nothing deleted, no error.
	f.log = nil
	stdout, stderr, err = f.run(t, &cleanupOptions{HubContext: "hub", LeaderElectionID: "endpoint-aggregator"})
	if err != nil || stdout != "" || !strings.Contains(stderr, "Nothing to delete") || len(f.writes()) > 0 {
		t.Errorf("second run: err %v, writes %v\nstdout:\n%s\nstderr:\n%s", err, f.writes(), stdout, stderr)
	}
}

func TestCleanupDryRunWritesNothing(t *testing.T) {
	f := newCleanupFixture(cleanupHub())
	stdout, stderr, err := f.run(t, &cleanupOptions{HubContext: "hub", LeaderElectionID: "endpoint-aggregator", DryRun: true, Output: "json",
		DeleteDeployment: "endpoint-aggregator", Wait: time.Minute})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if w := f.writes(); len(w) > 0 {
		t.Errorf("dry run wrote: %v", w)
	}
	var r cleanupReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	want := map[string]int{kindSlice: 2, kindEndpoints: 1, kindService: 2, kindServiceImport: 1, kindLease: 2, kindConfigMap: 1}
	if !r.DryRun || len(r.Objects) != 9 || !maps.Equal(r.Counts, want) || r.Objects[0].Result != resultWouldDelete {
		t.Errorf("report %+v, want counts %v", r, want)
	}
	if !strings.Contains(stderr, "Dry run: would delete 2 EndpointSlices") || !strings.Contains(stderr, "would delete deployment/endpoint-aggregator") {
		t.Errorf("stderr:\n%s", stderr)
	}
}

// heldLeader is the leader election Lease of a running daemon.
func cleanupHeldLeader(renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: cleanupMeta(cleanupNS, "endpoint-aggregator", nil),
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pod-1_abc"), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &metav1.MicroTime{Time: renewed}}}
}

func cleanupMemberLease(renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: cleanupMeta(cleanupNS, easync.MemberLeasePrefix+"west", map[string]string{endpoints.LabelManagedBy: endpoints.ManagedByValue, easync.LabelLeaseCluster: "west"}),
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("endpoint-aggregator"), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &metav1.MicroTime{Time: renewed}}}
}

// replace swaps the object of the same kind and name in objs for o.
func cleanupReplace(objs []runtime.Object, o *coordinationv1.Lease) []runtime.Object {
	out := slices.DeleteFunc(slices.Clone(objs), func(x runtime.Object) bool {
		l, ok := x.(*coordinationv1.Lease)
		return ok && l.Name == o.Name && l.Namespace == o.Namespace
	})
	return append(out, o)
}

func TestCleanupRefusesWhileADaemonRuns(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lease  *coordinationv1.Lease
		want   string
		writes int // with --force
	}{
		{"the leader Lease is held", cleanupHeldLeader(cleanupNow.Add(-3 * time.Second)), "leader election Lease endpoint-aggregator/endpoint-aggregator is held by pod-1_abc (renewed 3s ago, for 15s)", 9},
		{"a member Lease is fresh", cleanupMemberLease(cleanupNow.Add(-10 * time.Second)), "member Lease endpoint-aggregator/endpoint-aggregator-member-west was renewed 10s ago (for 40s)", 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube, mcs := cleanupHub()
			kube = cleanupReplace(kube, tc.lease)
			f := newCleanupFixture(kube, mcs)
			_, stderr, err := f.run(t, &cleanupOptions{HubContext: "hub", LeaderElectionID: "endpoint-aggregator"})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "would recreate everything") ||
				!strings.Contains(err.Error(), "Nothing was deleted") {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
			if w := f.writes(); len(w) > 0 {
				t.Errorf("refused, but wrote %v\n%s", w, stderr)
			}

			// A dry run lists anyway and warns.
			f = newCleanupFixture(kube, mcs)
			stdout, stderr, err := f.run(t, &cleanupOptions{HubContext: "hub", LeaderElectionID: "endpoint-aggregator", DryRun: true})
			if err != nil || !strings.Contains(stderr, "cleanup would refuse") || !strings.Contains(stdout, "would delete") || len(f.writes()) > 0 {
				t.Errorf("dry run: err %v, writes %v\nstdout:\n%s\nstderr:\n%s", err, f.writes(), stdout, stderr)
			}

			// --force deletes, and says what the daemon will do.
			f = newCleanupFixture(kube, mcs)
			_, stderr, err = f.run(t, &cleanupOptions{HubContext: "hub", LeaderElectionID: "endpoint-aggregator", Force: true})
			if err != nil || !strings.Contains(stderr, "--force: deleting anyway") || len(f.writes()) != tc.writes {
				t.Errorf("--force: err %v, writes %v\n%s", err, f.writes(), stderr)
			}
		})
	}
}

func TestCleanupWaitsForTheLeasesToLapse(t *testing.T) {
	kube, mcs := cleanupHub()
	// Renewed 35s ago for 40s: lapses in 5s.
	kube = cleanupReplace(kube, cleanupMemberLease(cleanupNow.Add(-35*time.Second)))
	f := newCleanupFixture(kube, mcs)
	clock := cleanupNow
	now := func() time.Time { clock = clock.Add(time.Second); return clock }
	_, stderr, err := f.run(t, &cleanupOptions{HubContext: "hub", LeaderElectionID: "endpoint-aggregator", Wait: time.Minute, now: now, poll: time.Millisecond})
	if err != nil || len(f.writes()) != 10 {
		t.Fatalf("err %v, writes %v\n%s", err, f.writes(), stderr)
	}
	if clock.Sub(cleanupNow) > 20*time.Second {
		t.Errorf("waited until %s, the Lease lapsed at 5s", clock.Sub(cleanupNow))
	}

	// Too short a wait: refused.
	f = newCleanupFixture(kube, mcs)
	clock = cleanupNow
	_, _, err = f.run(t, &cleanupOptions{HubContext: "hub", LeaderElectionID: "endpoint-aggregator", Wait: 2 * time.Second, now: now, poll: time.Millisecond})
	if err == nil || len(f.writes()) > 0 {
		t.Errorf("--wait shorter than the Lease: err %v, writes %v", err, f.writes())
	}
}

func TestCleanupDeletesTheDeploymentFirstAndWaitsForIt(t *testing.T) {
	kube, mcs := cleanupHub()
	kube = append(kube, &appsv1.Deployment{ObjectMeta: cleanupMeta(cleanupNS, "endpoint-aggregator", nil)})
	f := newCleanupFixture(kube, mcs)
	var propagation metav1.DeletionPropagation
	f.kube.PrependReactor("delete", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if p := a.(k8stesting.DeleteActionImpl).DeleteOptions.PropagationPolicy; p != nil {
			propagation = *p
		}
		return false, nil, nil
	})
	_, stderr, err := f.run(t, &cleanupOptions{HubContext: "hub", LeaderElectionID: "endpoint-aggregator", DeleteDeployment: "endpoint-aggregator", Wait: time.Minute, poll: time.Millisecond})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	w := f.writes()
	if len(w) != 10 || w[0] != "delete deployments "+cleanupNS+"/endpoint-aggregator" || propagation != metav1.DeletePropagationForeground {
		t.Errorf("writes %v, propagation %q: want the Deployment deleted first, in the foreground", w, propagation)
	}

	// A Deployment that stays (its pods do not stop) stops cleanup.
	kube = append(kube[:len(kube)-1], &appsv1.Deployment{ObjectMeta: cleanupMeta(cleanupNS, "endpoint-aggregator", nil)})
	f = newCleanupFixture(kube, mcs)
	f.kube.PrependReactor("delete", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
		f.log = append(f.log, "delete deployments (kept)")
		return true, nil, nil
	})
	clock := cleanupNow
	_, _, err = f.run(t, &cleanupOptions{HubContext: "hub", LeaderElectionID: "endpoint-aggregator", DeleteDeployment: "endpoint-aggregator", Wait: 5 * time.Second,
		now: func() time.Time { clock = clock.Add(time.Second); return clock }, poll: time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "its pods have not stopped; nothing else was deleted") || len(f.writes()) != 1 {
		t.Errorf("err %v, writes %v", err, f.writes())
	}
}

func TestCleanupWithoutServiceImportCRDAndRaces(t *testing.T) {
	kube, mcs := cleanupHub()
	f := newCleanupFixture(kube, mcs)
	f.mcs.PrependReactor("list", "serviceimports", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "multicluster.x-k8s.io", Resource: "serviceimports"}, "")
	})
	// The derived Service was replaced by a user's after the list.
	derived := endpoints.DerivedServiceName("shop", "cart")
	f.kube.PrependReactor("delete", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.DeleteAction).GetName() == derived {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "services"}, derived, nil)
		}
		return false, nil, nil
	})
	stdout, stderr, err := f.run(t, &cleanupOptions{HubContext: "hub", LeaderElectionID: "endpoint-aggregator"})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, resultReplaced) || strings.Contains(stdout, kindServiceImport) || !strings.Contains(stderr, "Deleted 2 EndpointSlices, 1 Endpoints, 1 Service, 2 Leases, 1 ConfigMap.") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}

	// A failing list deletes nothing.
	f = newCleanupFixture(kube, mcs)
	f.kube.PrependReactor("list", "endpoints", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "endpoints"}, "", nil)
	})
	_, _, err = f.run(t, &cleanupOptions{HubContext: "hub"})
	if err == nil || !strings.Contains(err.Error(), "listing Endpoints") || !strings.Contains(err.Error(), "nothing was deleted") || len(f.writes()) > 0 {
		t.Errorf("err %v, writes %v", err, f.writes())
	}
}

// cleanupWithFlags is cleanupOptions as the command line sets them.
func cleanupWithFlags(t *testing.T, args ...string) *cleanupOptions {
	t.Helper()
	o := &cleanupOptions{kube: newKubeFlags(), Output: "table", LeaderElectionID: NewOptions().LeaderElectionID}
	cmd := &cobra.Command{}
	o.addFlags(cmd)
	if err := cmd.Flags().Parse(args); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestCleanupUsesTheLeaderLeaseTheDaemonPublished(t *testing.T) {
	kube, mcs := cleanupHub()
	held := cleanupHeldLeader(cleanupNow.Add(-3 * time.Second))
	held.Name, held.UID = "release-lease", "held"
	kube[len(kube)-1] = cleanupPublished("release-lease") // cleanupHub's last
	kube = append(kube, held)

	// Not given: the published Lease name, which a running daemon holds.
	f := newCleanupFixture(kube, mcs)
	_, stderr, err := f.run(t, cleanupWithFlags(t, "--hub-context=hub"))
	if err == nil || !strings.Contains(err.Error(), "leader election Lease endpoint-aggregator/release-lease is held by pod-1_abc") || len(f.writes()) > 0 {
		t.Errorf("err %v, writes %v\n%s", err, f.writes(), stderr)
	}
	if strings.Contains(stderr, "Warning") {
		t.Errorf("warned with nothing to warn about:\n%s", stderr)
	}

	// Given and different: the given one wins, with a warning.
	f = newCleanupFixture(kube, mcs)
	_, stderr, err = f.run(t, cleanupWithFlags(t, "--hub-context=hub", "--leader-election-id=endpoint-aggregator", "--dry-run"))
	if err != nil || !strings.Contains(stderr, "Warning: --leader-election-id=endpoint-aggregator given, but the daemon runs with --leader-election-id=release-lease") {
		t.Errorf("err %v\n%s", err, stderr)
	}

	// Nothing published: the default, said once.
	kube, mcs = cleanupHub()
	f = newCleanupFixture(kube[:len(kube)-1], mcs)
	_, stderr, err = f.run(t, cleanupWithFlags(t, "--hub-context=hub", "--dry-run"))
	if err != nil || strings.Count(stderr, "the daemon publishes no configuration") != 1 {
		t.Errorf("err %v\n%s", err, stderr)
	}
}
