package sync

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// With AliasDomain, the clusterset sync writes the import's alias, an
// ExternalName Service naming the derived Service.
func TestSyncClusterSetWritesTheImportsAlias(t *testing.T) {
	f := newFixture(t, Options{AliasDomain: "cluster.local"}, nil, nil)
	_ = f.member("c1").services.Add(service("shop", "cart"))
	f.sync(cartC1)
	f.sync(cartC1.ClusterSet())
	alias, err := f.hub.CoreV1().Services("shop").Get(f.ctx, "cart-clusterset", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := endpoints.DerivedServiceName("shop", "cart") + ".shop.svc.cluster.local"; alias.Spec.Type != corev1.ServiceTypeExternalName || alias.Spec.ExternalName != want {
		t.Errorf("alias %s %q, want ExternalName %q", alias.Spec.Type, alias.Spec.ExternalName, want)
	}
	f.resetActions()
	f.sync(cartC1.ClusterSet())
	if got := f.writes(); len(got) != 0 {
		t.Errorf("an in-sync import wrote %q", got)
	}
}

// A Service of someone else's holding the alias's name is left alone and
// reported as a NameConflict; the import and its derived Service are
// written all the same.
func TestSyncLeavesAForeignServiceHoldingTheAliasName(t *testing.T) {
	foreign := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart-clusterset"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}}}
	rec := record.NewFakeRecorder(20)
	f := newFixture(t, Options{AliasDomain: "cluster.local", Recorder: rec}, []runtime.Object{foreign}, nil)
	_ = f.member("c1").services.Add(service("shop", "cart"))
	f.sync(cartC1)
	var conflict *conflictError
	for range 2 { // the create finds the name taken; the next sync knows it
		if err := f.ctrl.sync(f.ctx, cartC1.ClusterSet()); !errors.As(err, &conflict) {
			t.Fatalf("sync error = %v, want a conflict", err)
		}
		f.settle()
	}
	got, _ := f.hub.CoreV1().Services("shop").Get(f.ctx, "cart-clusterset", metav1.GetOptions{})
	if !reflect.DeepEqual(got, foreign) {
		t.Errorf("foreign Service changed:\n%v", got)
	}
	imp, err := f.hubMCS.MulticlusterV1beta1().ServiceImports("shop").Get(f.ctx, "cart", metav1.GetOptions{})
	if err != nil || len(imp.Status.Clusters) != 1 || len(imp.Status.Conditions) == 0 {
		t.Fatalf("the import is not written in full: %v %v", imp, err)
	}
	if _, err := f.hub.CoreV1().Services("shop").Get(f.ctx, endpoints.DerivedServiceName("shop", "cart"), metav1.GetOptions{}); err != nil {
		t.Fatalf("no derived Service: %v", err)
	}
	found := false
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, ReasonNameConflict) {
			found = true
		}
	}
	if !found {
		t.Error("no NameConflict Event")
	}
}

// A member named "clusterset" has per-cluster Services named like the
// aliases. Whichever comes first keeps the name; the other is a conflict,
// and neither the member's MCS slices nor the import wait for it.
func TestAMemberNamedLikeTheAliasSuffixConflictsWithoutBlocking(t *testing.T) {
	for _, aliasFirst := range []bool{false, true} {
		t.Run(map[bool]string{false: "the member's Service first", true: "the alias first"}[aliasFirst], func(t *testing.T) {
			f := newFixture(t, Options{AliasDomain: "cluster.local"}, nil, nil)
			member := Key{Cluster: endpoints.AliasSuffix, Namespace: "shop", Name: "cart"}
			m := f.member(member.Cluster)
			_ = m.services.Add(service("shop", "cart"))
			m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-abc", 0, 2, true)}
			_ = f.member("c1").services.Add(service("shop", "cart"))
			f.sync(cartC1)
			keys := []Key{member, cartC1.ClusterSet()}
			if aliasFirst {
				// The import exists once a member has recorded its export.
				keys = []Key{cartC1.ClusterSet(), member, cartC1.ClusterSet()}
			}
			var conflicts int
			for _, k := range keys {
				err := f.ctrl.sync(f.ctx, k)
				var conflict *conflictError
				switch {
				case errors.As(err, &conflict):
					conflicts++
				case err != nil:
					t.Fatalf("sync %s: %v", k, err)
				}
				f.settle()
			}
			if conflicts == 0 {
				t.Error("no conflict reported for the shared name")
			}
			slices, _ := f.hub.DiscoveryV1().EndpointSlices("shop").List(f.ctx, metav1.ListOptions{LabelSelector: mcsv1beta1.LabelSourceCluster + "=" + member.Cluster})
			if n := len(slices.Items); n == 0 || len(slices.Items[0].Endpoints) != 2 {
				t.Errorf("the member's MCS slices: %d", n)
			}
			imp, err := f.hubMCS.MulticlusterV1beta1().ServiceImports("shop").Get(f.ctx, "cart", metav1.GetOptions{})
			if err != nil || len(imp.Status.Clusters) != 2 {
				t.Errorf("the import: %v %v", imp, err)
			}
			svc, err := f.hub.CoreV1().Services("shop").Get(f.ctx, "cart-clusterset", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := svc.Spec.Type == corev1.ServiceTypeExternalName, aliasFirst; got != want {
				t.Errorf("cart-clusterset is the alias: %v, want %v", got, want)
			}
		})
	}
}
