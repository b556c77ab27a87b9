package e2e

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// member is one member cluster as the MCS tests use it.
type member struct {
	name string
	kube kubernetes.Interface
	mcs  mcsclientset.Interface
}

func mcsMember(c *testenv.Cluster) member {
	return member{name: c.Name, kube: c.Client, mcs: mcsclientset.NewForConfigOrDie(c.Config)}
}

// service creates a plain (not annotated) Service in a member.
func (m member) service(t *testing.T, name string, mutate func(*corev1.Service)) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: name},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	if mutate != nil {
		mutate(svc)
	}
	if _, err := m.kube.CoreV1().Services(appNamespace).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// export creates the ServiceExport of name in a member.
func (m member) export(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	se := &mcsv1beta1.ServiceExport{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: name},
		Spec:       mcsv1beta1.ServiceExportSpec{ExportedLabels: labels},
	}
	if _, err := m.mcs.MulticlusterV1beta1().ServiceExports(appNamespace).Create(context.Background(), se, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (m member) unexport(t *testing.T, name string) {
	t.Helper()
	if err := m.mcs.MulticlusterV1beta1().ServiceExports(appNamespace).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// condition waits for a condition of a member's ServiceExport to have the
// given status and reason, and returns it.
func (m member) condition(t *testing.T, name, condType string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	eventually(t, waitTimeout, func() error {
		se, err := m.mcs.MulticlusterV1beta1().ServiceExports(appNamespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(se.Status.Conditions, condType)
		if c == nil || c.Status != status || c.Reason != reason {
			return fmt.Errorf("%s: ServiceExport %s condition %s = %+v, want %s/%s", m.name, name, condType, c, status, reason)
		}
		got = *c
		return nil
	})
	return got
}

func (e *env) serviceImport(t *testing.T, name string) (*mcsv1beta1.ServiceImport, error) {
	t.Helper()
	return e.hubMCS.MulticlusterV1beta1().ServiceImports(appNamespace).Get(context.Background(), name, metav1.GetOptions{})
}

// TestMultiClusterServicesSemantics exports services with ServiceExports
// (the default mode) from two members and checks the KEP-1645 behaviour.
func TestMultiClusterServicesSemantics(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	east, west := mcsMember(e.east), mcsMember(e.west)
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	e.startDaemon(t, func(o *app.Options) { o.ExportMode = string(easync.ExportServiceExport) })

	t.Run("ports are the union across members, and differing port sets conflict", func(t *testing.T) {
		east.service(t, "union", nil)
		west.service(t, "union", func(s *corev1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "grpc", Port: 9090, Protocol: corev1.ProtocolTCP})
		})
		east.export(t, "union", nil)
		west.export(t, "union", nil)
		eventually(t, waitTimeout, func() error {
			imp, err := e.serviceImport(t, "union")
			if err != nil {
				return err
			}
			var ports []string
			for _, p := range imp.Spec.Ports {
				ports = append(ports, fmt.Sprintf("%s:%d", p.Name, p.Port))
			}
			if !reflect.DeepEqual(ports, []string{"grpc:9090", "http:80"}) {
				return fmt.Errorf("import ports %v", ports)
			}
			return nil
		})
		// KEP-1645: a port only some clusters export is a PortConflict, on
		// every export of the service.
		for _, m := range []member{east, west} {
			c := m.condition(t, "union", "Conflict", metav1.ConditionTrue, "PortConflict")
			if !strings.Contains(c.Message, `port "grpc"`) || !strings.Contains(c.Message, "east") {
				t.Errorf("%s: conflict message %q should name port grpc and east, which lacks it", m.name, c.Message)
			}
		}
		east.condition(t, "union", "Valid", metav1.ConditionTrue, "Valid")
		west.condition(t, "union", "Ready", metav1.ConditionTrue, "Ready")
	})

	t.Run("a port conflict resolves to the oldest export and both exports say so", func(t *testing.T) {
		east.service(t, "ports", nil)
		west.service(t, "ports", func(s *corev1.Service) { s.Spec.Ports[0].Port = 8080 })
		east.export(t, "ports", nil) // older: wins
		west.export(t, "ports", nil)
		for _, m := range []member{east, west} {
			c := m.condition(t, "ports", "Conflict", metav1.ConditionTrue, "PortConflict")
			if !strings.Contains(c.Message, "west") || !strings.Contains(c.Message, "east") {
				t.Errorf("%s: conflict message %q should name both clusters", m.name, c.Message)
			}
		}
		imp, err := e.serviceImport(t, "ports")
		if err != nil {
			t.Fatal(err)
		}
		if len(imp.Spec.Ports) != 1 || imp.Spec.Ports[0].Port != 80 {
			t.Errorf("import ports %+v, want east's 80", imp.Spec.Ports)
		}
		if c := meta.FindStatusCondition(imp.Status.Conditions, "Conflict"); c == nil || c.Reason != "PortConflict" {
			t.Errorf("ServiceImport Conflict condition %+v", c)
		}
	})

	t.Run("an export that lost a port name leaves it out of its MCS slices until the winner goes", func(t *testing.T) {
		// The data plane pairs the derived Service's ports with slice
		// ports by name: west's "http" (8080) lost to east's (80), so
		// west's slices must not carry "http", or traffic to 80 would
		// reach west. The mcs-api suite's StrictPortConflict asks this.
		east.service(t, "strict", nil)
		west.service(t, "strict", func(s *corev1.Service) { s.Spec.Ports[0].Port = 8080 })
		applySlices(t, e.east.Client, "strict", endpointSlice("strict", "strict-east", 1, 2, true))
		applySlices(t, e.west.Client, "strict", endpointSlice("strict", "strict-west", 2, 2, true))
		east.export(t, "strict", nil) // older: wins "http"
		west.export(t, "strict", nil)
		west.condition(t, "strict", "Conflict", metav1.ConditionTrue, "PortConflict")
		slicePorts := func(cluster string) (string, error) {
			list, err := e.hub.Client.DiscoveryV1().EndpointSlices(appNamespace).List(context.Background(), metav1.ListOptions{
				LabelSelector: mcsv1beta1.LabelServiceName + "=strict," + mcsv1beta1.LabelSourceCluster + "=" + cluster,
			})
			if err != nil {
				return "", err
			}
			var ports []string
			n := 0
			for _, s := range list.Items {
				n += len(s.Endpoints)
				for _, p := range s.Ports {
					ports = append(ports, fmt.Sprintf("%s:%d", ptr.Deref(p.Name, ""), ptr.Deref(p.Port, 0)))
				}
			}
			if n != 2 {
				return "", fmt.Errorf("%s has %d endpoints in the hub, want 2", cluster, n)
			}
			return strings.Join(ports, ","), nil
		}
		wantPorts := func(want map[string]string) {
			t.Helper()
			eventually(t, waitTimeout, func() error {
				for cluster, w := range want {
					got, err := slicePorts(cluster)
					if err != nil {
						return err
					}
					if got != w {
						return fmt.Errorf("%s's MCS slices have ports %q, want %q", cluster, got, w)
					}
				}
				return nil
			})
		}
		wantPorts(map[string]string{"east": "http:8080", "west": ""})

		// With east's export gone, the name is west's.
		east.unexport(t, "strict")
		wantPorts(map[string]string{"west": "http:8080"})
		eventually(t, waitTimeout, func() error {
			imp, err := e.serviceImport(t, "strict")
			if err != nil {
				return err
			}
			if len(imp.Spec.Ports) != 1 || imp.Spec.Ports[0].Port != 8080 {
				return fmt.Errorf("import ports %+v, want west's 8080", imp.Spec.Ports)
			}
			return nil
		})
	})

	t.Run("a member renumbering a port raises ExportConflict once, and ConflictResolved when it agrees again", func(t *testing.T) {
		// Only the import's Conflict condition changes: its ports are
		// east's, the oldest export's, throughout.
		east.service(t, "renumbered", nil)
		west.service(t, "renumbered", nil)
		east.export(t, "renumbered", nil)
		west.export(t, "renumbered", nil)
		east.condition(t, "renumbered", "Conflict", metav1.ConditionFalse, "NoConflicts")
		renumber := func(port int32) {
			t.Helper()
			svc, err := west.kube.CoreV1().Services(appNamespace).Get(context.Background(), "renumbered", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			svc.Spec.Ports[0].Port = port
			if _, err := west.kube.CoreV1().Services(appNamespace).Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		renumber(8081)
		east.condition(t, "renumbered", "Conflict", metav1.ConditionTrue, "PortConflict")
		imp, err := e.serviceImport(t, "renumbered")
		if err != nil {
			t.Fatal(err)
		}
		// On the import itself (its UID too, which kubectl describe
		// matches).
		importEvents := func(reason string) []corev1.Event {
			list, err := e.hub.Client.CoreV1().Events(appNamespace).List(context.Background(), metav1.ListOptions{
				FieldSelector: fields.Set{"involvedObject.kind": "ServiceImport", "involvedObject.name": "renumbered", "involvedObject.uid": string(imp.UID), "reason": reason}.String(),
			})
			if err != nil {
				t.Fatal(err)
			}
			return list.Items
		}
		eventually(t, waitTimeout, func() error {
			evs := importEvents(easync.ReasonExportConflict)
			if len(evs) != 1 || evs[0].Type != corev1.EventTypeWarning || evs[0].Count > 1 ||
				!strings.Contains(evs[0].Message, "PortConflict") || !strings.Contains(evs[0].Message, "west") {
				return fmt.Errorf("ExportConflict Events %+v, want one Warning naming PortConflict and west", evs)
			}
			return nil
		})
		renumber(80)
		east.condition(t, "renumbered", "Conflict", metav1.ConditionFalse, "NoConflicts")
		eventually(t, waitTimeout, func() error {
			if evs := importEvents(easync.ReasonConflictResolved); len(evs) != 1 || evs[0].Type != corev1.EventTypeNormal {
				return fmt.Errorf("ConflictResolved Events %+v, want one Normal", evs)
			}
			return nil
		})
		if evs := importEvents(easync.ReasonExportConflict); len(evs) != 1 || evs[0].Count > 1 {
			t.Errorf("ExportConflict Events %+v, want the one from before", evs)
		}
	})

	t.Run("a type conflict resolves to the oldest export", func(t *testing.T) {
		east.service(t, "kind", func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone })
		west.service(t, "kind", nil)
		east.export(t, "kind", nil)
		west.export(t, "kind", nil)
		west.condition(t, "kind", "Conflict", metav1.ConditionTrue, "TypeConflict")
		imp, err := e.serviceImport(t, "kind")
		if err != nil {
			t.Fatal(err)
		}
		if imp.Spec.Type != mcsv1beta1.Headless || len(imp.Spec.IPs) != 0 {
			t.Errorf("import type %s ips %v, want Headless without IPs", imp.Spec.Type, imp.Spec.IPs)
		}
	})

	t.Run("exported labels are copied and a label conflict is reported", func(t *testing.T) {
		east.service(t, "labels", nil)
		west.service(t, "labels", nil)
		east.export(t, "labels", map[string]string{"tier": "gold", "team": "shop"})
		west.export(t, "labels", map[string]string{"tier": "silver"})
		for _, m := range []member{east, west} {
			m.condition(t, "labels", "Conflict", metav1.ConditionTrue, "LabelsConflict")
		}
		imp, err := e.serviceImport(t, "labels")
		if err != nil {
			t.Fatal(err)
		}
		if imp.Labels["tier"] != "gold" || imp.Labels["team"] != "shop" {
			t.Errorf("import labels %v, want east's tier=gold and team=shop", imp.Labels)
		}
		if imp.Status.EndpointSliceObjects != mcsv1beta1.EndpointSliceObjectsPresent {
			t.Errorf("import endpointSliceObjects = %q, want Present", imp.Status.EndpointSliceObjects)
		}
	})

	t.Run("several conflicts are joined with commas on every export", func(t *testing.T) {
		east.service(t, "mixed", func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone })
		west.service(t, "mixed", func(s *corev1.Service) { s.Spec.Ports[0].Port = 81 })
		east.export(t, "mixed", map[string]string{"tier": "gold"})
		west.export(t, "mixed", nil)
		for _, m := range []member{east, west} {
			m.condition(t, "mixed", "Conflict", metav1.ConditionTrue, "LabelsConflict,PortConflict,TypeConflict")
		}
	})

	t.Run("an ExternalName export is invalid and never imported", func(t *testing.T) {
		east.service(t, "external", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeExternalName
			s.Spec.ExternalName = "example.invalid"
			s.Spec.Ports = nil
		})
		east.export(t, "external", nil)
		east.condition(t, "external", "Valid", metav1.ConditionFalse, "InvalidServiceType")
		east.condition(t, "external", "Ready", metav1.ConditionFalse, "Failed")
		if _, err := e.serviceImport(t, "external"); !apierrors.IsNotFound(err) {
			t.Errorf("ServiceImport for an ExternalName export: err=%v", err)
		}
		east.export(t, "ghost", nil)
		east.condition(t, "ghost", "Valid", metav1.ConditionFalse, "NoService")
		east.condition(t, "ghost", "Ready", metav1.ConditionFalse, "Pending")
	})

	t.Run("a headless service from two members keeps its hostnames", func(t *testing.T) {
		for i, m := range []member{east, west} {
			m.service(t, "db", func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone })
			sl := endpointSlice("db", "db-1", 10+i, 2, true)
			for j := range sl.Endpoints {
				sl.Endpoints[j].Hostname = ptr.To(fmt.Sprintf("db-%d", j))
			}
			applySlices(t, m.kube, "db", sl)
			m.export(t, "db", nil)
		}
		eventually(t, waitTimeout, func() error {
			slices, err := e.hub.Client.DiscoveryV1().EndpointSlices(appNamespace).List(context.Background(), metav1.ListOptions{
				LabelSelector: mcsv1beta1.LabelServiceName + "=db," + discoveryv1.LabelManagedBy + "=" + endpoints.SliceManagedByValue})
			if err != nil {
				return err
			}
			var names []string
			for _, s := range slices.Items {
				for _, ep := range s.Endpoints {
					names = append(names, s.Labels[mcsv1beta1.LabelSourceCluster]+"/"+ptr.Deref(ep.Hostname, ""))
				}
			}
			sort.Strings(names)
			if want := []string{"east/db-0", "east/db-1", "west/db-0", "west/db-1"}; !reflect.DeepEqual(names, want) {
				return fmt.Errorf("hub endpoints %v, want %v", names, want)
			}
			return nil
		})
		// The import follows the slices that record the exports.
		eventually(t, waitTimeout, func() error {
			imp, err := e.serviceImport(t, "db")
			if err != nil {
				return err
			}
			if imp.Spec.Type != mcsv1beta1.Headless {
				return fmt.Errorf("db import type %s", imp.Spec.Type)
			}
			return nil
		})
	})

	t.Run("unexporting from one of two members keeps the import and withdraws that member", func(t *testing.T) {
		for _, m := range []member{east, west} {
			applySlices(t, m.kube, "union", endpointSlice("union", "union-1", 20, 3, true))
		}
		waitFor(t, e, "union", map[string]int{"east": 3, "west": 3}, map[string]int{"east": 3, "west": 3})
		west.unexport(t, "union")
		waitFor(t, e, "union", map[string]int{"east": 3}, map[string]int{"east": 3})
		eventually(t, waitTimeout, func() error {
			imp, err := e.serviceImport(t, "union")
			if err != nil {
				return err
			}
			if len(imp.Status.Clusters) != 1 || imp.Status.Clusters[0].Cluster != "east" {
				return fmt.Errorf("import clusters %v", imp.Status.Clusters)
			}
			// Only east's port is left.
			if len(imp.Spec.Ports) != 1 {
				return fmt.Errorf("import ports %v", imp.Spec.Ports)
			}
			return nil
		})
	})

	t.Run("unexporting from the last member removes the import and the derived Service", func(t *testing.T) {
		east.unexport(t, "union")
		eventually(t, waitTimeout, func() error {
			st := e.hubState(t, "union")
			if len(st.total) != 0 || st.derived != nil || len(st.perClusterServices) != 0 {
				return fmt.Errorf("union objects remain: %+v", st)
			}
			if _, err := e.serviceImport(t, "union"); !apierrors.IsNotFound(err) {
				return fmt.Errorf("ServiceImport remains (err %v)", err)
			}
			return nil
		})
	})
}

// TestHubAsMemberImportsItsOwnExportsWithoutFeedingItself runs the daemon
// with --hub-is-member and --export-mode=all: the hub's own Services are
// imported, but what the daemon wrote is never exported again.
func TestHubAsMemberImportsItsOwnExportsWithoutFeedingItself(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	e.register(t, "east", "east", e.east.Kubeconfig)
	d := e.startDaemon(t, func(o *app.Options) {
		o.ExportMode = string(easync.ExportAll)
		o.HubIsMember = true
		o.HubClusterName = "hub"
	})
	mcsMember(e.east).service(t, "cart", nil)
	mcsMember(e.hub).service(t, "cart", nil)
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-1", 1, 2, true))
	applySlices(t, e.hub.Client, "cart", endpointSlice("cart", "cart-1", 2, 3, true))

	waitFor(t, e, "cart", map[string]int{"east": 2, "hub": 3}, map[string]int{"east": 2, "hub": 3})
	d.waitSettled(t)
	for name, obj := range e.ourObjects(t) {
		if strings.HasSuffix(name, "-hub") && strings.Contains(name, "-east-hub") || strings.Contains(name, "derived-") && obj.cluster == "hub" && strings.HasPrefix(name, "Service/") {
			t.Errorf("the daemon's own output was exported again: %s", name)
		}
	}
	svcs, err := e.hub.Client.CoreV1().Services(appNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range svcs.Items {
		names = append(names, s.Name)
	}
	sort.Strings(names)
	want := []string{"cart", "cart-east", "cart-hub", endpoints.DerivedServiceName(appNamespace, "cart")}
	sort.Strings(want)
	if !reflect.DeepEqual(names, want) {
		t.Errorf("hub Services %v, want exactly %v", names, want)
	}
	// And it stays that way: a settled daemon writes nothing more.
	before := d.writes.n.Load()
	d.waitSettled(t)
	if after := d.writes.n.Load(); after != before {
		t.Errorf("daemon kept writing on a settled hub: %d more writes", after-before)
	}
}
