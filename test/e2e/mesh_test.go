package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// mesh is a ClusterSet in which every cluster is a hub: one daemon per
// cluster, each registering every cluster (itself with --hub-is-member).
type mesh struct {
	names    []string
	clusters map[string]*testenv.Cluster
	daemons  map[string]*daemon
}

func startMesh(t *testing.T, names ...string) *mesh {
	t.Helper()
	specs := make([]testenv.Spec, len(names))
	for i, n := range names {
		specs[i] = testenv.Spec{Name: n, Options: testenv.Options{CRDs: true}}
	}
	cs := testenv.StartAllT(t, specs...)
	m := &mesh{names: names, clusters: map[string]*testenv.Cluster{}, daemons: map[string]*daemon{}}
	for i, n := range names {
		m.clusters[n] = cs[i]
		mustCreateNamespace(t, cs[i].Client, appNamespace)
		mustCreateNamespace(t, cs[i].Client, daemonNamespace)
	}
	for _, hub := range names {
		e := &env{hub: m.clusters[hub]}
		for _, other := range names {
			if other != hub {
				e.register(t, other, other, m.clusters[other].Kubeconfig)
			}
		}
		m.startDaemon(t, hub)
	}
	return m
}

// startDaemon (re)starts the daemon of hub, with a fresh registry.
func (m *mesh) startDaemon(t *testing.T, hub string) {
	m.daemons[hub] = startDaemonOn(t, t, m.clusters[hub].Config, func(o *app.Options) {
		o.ExportMode = string(easync.ExportServiceExport)
		o.HubIsMember = true
		o.HubClusterName = hub
		// Outages are noticed within two seconds: well within the leader
		// election's renew deadline, which the restart of a hub's API
		// server must not outlast.
		o.ProbeInterval, o.ProbeTimeout = time.Second, time.Second
	})
}

// settle waits until every daemon is settled and their member status writes
// have stopped, and returns those counts.
func (m *mesh) settle(t *testing.T) map[string]int {
	t.Helper()
	var last map[string]int
	eventually(t, 2*waitTimeout, func() error {
		for _, n := range m.names {
			if d := m.daemons[n]; !d.Ready() || d.Controller.Pending() > 0 {
				return fmt.Errorf("daemon of %s busy", n)
			}
		}
		now := m.statusWrites(t)
		same := last != nil && fmt.Sprint(now) == fmt.Sprint(last)
		last = now
		if !same {
			time.Sleep(time.Second) // the counts must hold across a second
			return fmt.Errorf("status writes still moving: %v", now)
		}
		return nil
	})
	for _, n := range m.names {
		m.daemons[n].waitSettled(t)
	}
	return last
}

// holdEndpoints waits until every hub holds n endpoints of svc from cluster
// in its MCS EndpointSlices.
func (m *mesh) holdEndpoints(t *testing.T, svc, cluster string, n int) {
	t.Helper()
	eventually(t, waitTimeout, func() error {
		for _, hub := range m.names {
			list, err := m.clusters[hub].Client.DiscoveryV1().EndpointSlices(appNamespace).List(context.Background(), metav1.ListOptions{
				LabelSelector: "multicluster.kubernetes.io/service-name=" + svc + "," + labelMCSSourceCluster + "=" + cluster + "," +
					discoveryv1.LabelManagedBy + "=" + endpoints.SliceManagedByValue,
			})
			if err != nil {
				return err
			}
			got := 0
			for _, s := range list.Items {
				got += len(s.Endpoints)
			}
			if got != n {
				return fmt.Errorf("hub %s holds %d endpoints of %s from %s, want %d", hub, got, svc, cluster, n)
			}
		}
		return nil
	})
}

// statusWrites returns, per daemon, the ServiceExport status writes it made.
func (m *mesh) statusWrites(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, n := range m.names {
		out[n] = int(counterValue(t, m.daemons[n], "endpoint_aggregator_member_writes_total"))
	}
	return out
}

// export creates a Service with one endpoint slice and its ServiceExport in
// cluster n.
func (m *mesh) export(t *testing.T, n, svc string, port int32, octet int) {
	t.Helper()
	c := mcsMember(m.clusters[n])
	c.service(t, svc, func(s *corev1.Service) { s.Spec.Ports[0].Port = port })
	applySlices(t, c.kube, svc, endpointSlice(svc, svc+"-1", octet, 2, true))
	c.export(t, svc, nil)
}

// imports returns the ServiceImport svc of every hub, failing if one lacks it.
func (m *mesh) imports(svc string) (map[string]*mcsv1beta1.ServiceImport, error) {
	out := map[string]*mcsv1beta1.ServiceImport{}
	for _, n := range m.names {
		imp, err := mcsMember(m.clusters[n]).mcs.MulticlusterV1beta1().ServiceImports(appNamespace).Get(context.Background(), svc, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("hub %s: %w", n, err)
		}
		out[n] = imp
	}
	return out, nil
}

// agree waits until every hub imports svc from exactly clusters, with one
// spec (but its IPs) and one Conflict condition everywhere, and returns
// that condition.
func (m *mesh) agree(t *testing.T, svc string, clusters []string) metav1.Condition {
	t.Helper()
	var cond metav1.Condition
	eventually(t, waitTimeout, func() error {
		imps, err := m.imports(svc)
		if err != nil {
			return err
		}
		var first string
		for _, n := range m.names {
			imp := imps[n]
			var got []string
			for _, c := range imp.Status.Clusters {
				got = append(got, c.Cluster)
			}
			sort.Strings(got)
			if !slices.Equal(got, clusters) {
				return fmt.Errorf("hub %s imports %s from %v, want %v", n, svc, got, clusters)
			}
			if imp.Status.EndpointSliceObjects != mcsv1beta1.EndpointSliceObjectsPresent {
				return fmt.Errorf("hub %s: endpointSliceObjects %q", n, imp.Status.EndpointSliceObjects)
			}
			c := meta.FindStatusCondition(imp.Status.Conditions, endpoints.ConditionConflict)
			if c == nil {
				return fmt.Errorf("hub %s: no Conflict condition", n)
			}
			spec := imp.Spec.DeepCopy()
			spec.IPs = nil
			specJSON, _ := json.Marshal(spec)
			this := fmt.Sprintf("%s %s %s %s", specJSON, c.Status, c.Reason, c.Message)
			if first == "" {
				first, cond = this, *c
			} else if this != first {
				return fmt.Errorf("hubs disagree on %s:\n%s\n%s", svc, first, this)
			}
		}
		return nil
	})
	return cond
}

// TestEveryClusterAHub runs a ClusterSet in which every cluster runs the
// daemon and registers every cluster: all clusters import the same, the
// daemons never fight over the members' ServiceExport conditions, and none
// imports another's output.
func TestEveryClusterAHub(t *testing.T) {
	t.Parallel()
	for _, names := range [][]string{{"east", "west"}, {"east", "west", "north"}} {
		t.Run(fmt.Sprintf("%d clusters", len(names)), func(t *testing.T) {
			m := startMesh(t, names...)
			all := slices.Sorted(slices.Values(names))

			// cart agrees everywhere; db's port differs in each cluster,
			// and the last cluster exports first: its port wins.
			for i, n := range names {
				m.export(t, n, "cart", 80, i+1)
			}
			last := names[len(names)-1]
			m.export(t, last, "db", 5432+int32(len(names)-1), 50)
			time.Sleep(1100 * time.Millisecond) // creation times have second resolution
			for i, n := range names[:len(names)-1] {
				m.export(t, n, "db", 5432+int32(i), 50+i+1)
			}
			if c := m.agree(t, "cart", all); c.Status != metav1.ConditionFalse {
				t.Errorf("cart: Conflict %+v", c)
			}
			dbConflict := m.agree(t, "db", all)
			if dbConflict.Status != metav1.ConditionTrue || dbConflict.Reason != string(endpoints.PortConflict) {
				t.Errorf("db: Conflict %+v, want PortConflict", dbConflict)
			}
			imps, _ := m.imports("db")
			if p := imps[names[0]].Spec.Ports; len(p) != 1 || p[0].Port != 5432+int32(len(names)-1) {
				t.Errorf("db ports %+v, want the oldest export's, from %s", p, last)
			}
			for _, n := range names {
				c := mcsMember(m.clusters[n])
				c.condition(t, "cart", "Ready", metav1.ConditionTrue, "Ready")
				c.condition(t, "cart", "Conflict", metav1.ConditionFalse, "NoConflicts")
				got := c.condition(t, "db", "Conflict", metav1.ConditionTrue, string(endpoints.PortConflict))
				if got.Message != dbConflict.Message {
					t.Errorf("%s: db export's Conflict message %q, want the imports' %q", n, got.Message, dbConflict.Message)
				}
			}
			converged := m.settle(t)
			t.Logf("status writes per daemon until converged: %v", converged)
			// Every daemon syncs once more, after the events of the status
			// writes so far: a third endpoint of cart in the first cluster.
			// Once every hub holds it and all are settled, nothing feeds a
			// fight, and no status was written meanwhile.
			applySlices(t, m.clusters[names[0]].Client, "cart", endpointSlice("cart", "cart-1", 1, 3, true))
			m.holdEndpoints(t, "cart", names[0], 3)
			if again := m.settle(t); fmt.Sprint(again) != fmt.Sprint(converged) {
				t.Errorf("status writes after convergence: %v, then, once every daemon had synced a change of cart, %v", converged, again)
			}
			m.checkNoReimport(t, []string{"cart", "db"})

			// Unexport cart from the second cluster: every hub drops it.
			mcsMember(m.clusters[names[1]]).unexport(t, "cart")
			m.agree(t, "cart", slices.DeleteFunc(slices.Clone(all), func(s string) bool { return s == names[1] }))
			before := m.settle(t)

			// One cluster's API server goes away and comes back.
			down := time.Now()
			if err := m.clusters[last].StopAPIServer(); err != nil {
				t.Fatal(err)
			}
			// It comes back once every daemon has found it unreachable.
			eventually(t, waitTimeout, func() error {
				for _, n := range names {
					c := m.daemons[n].Registry.Get(last)
					if c == nil {
						return fmt.Errorf("daemon of %s does not know %s", n, last)
					}
					if _, down := c.UnreachableSince(); !down {
						return fmt.Errorf("daemon of %s has not found %s unreachable", n, last)
					}
				}
				return nil
			})
			if err := m.clusters[last].StartAPIServer(); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s's API server was down for %s", last, time.Since(down).Round(100*time.Millisecond))
			m.agree(t, "db", all)
			after := m.settle(t)
			t.Logf("status writes per daemon: %v after the unexport, %v after %s's API server restarted", before, after, last)
			if fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("the API server restart made status writes: %v, then %v", before, after)
			}

			// Each daemon in turn restarts against its converged hub: it
			// writes nothing, and neither do the others.
			for _, r := range names {
				m.daemons[r].stop()
				m.startDaemon(t, r)
				restarted := m.settle(t)
				if n := restarted[r]; n != 0 {
					t.Errorf("restarted daemon of %s made %d status writes", r, n)
				}
				if w := m.daemons[r].writes.n.Load(); w != 0 {
					t.Errorf("restarted daemon of %s made %d hub writes", r, w)
				}
				for _, n := range names {
					if n != r && restarted[n] != after[n] {
						t.Errorf("daemon of %s wrote status after %s restarted: %d, then %d", n, r, after[n], restarted[n])
					}
				}
				after[r] = restarted[r]
			}
			m.checkNoReimport(t, []string{"cart", "db"})
		})
	}
}

// checkNoReimport checks that each hub holds exactly the objects for the
// exported services and the mesh's clusters: no daemon exported what
// another wrote.
func (m *mesh) checkNoReimport(t *testing.T, svcs []string) {
	t.Helper()
	for _, hub := range m.names {
		c := m.clusters[hub]
		imps, err := mcsMember(c).mcs.MulticlusterV1beta1().ServiceImports(appNamespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, imp := range imps.Items {
			got = append(got, imp.Name)
		}
		sort.Strings(got)
		if !slices.Equal(got, svcs) {
			t.Errorf("hub %s has ServiceImports %v, want %v", hub, got, svcs)
		}
		list, err := c.Client.CoreV1().Services(appNamespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		allowed := map[string]bool{}
		for _, s := range svcs {
			allowed[s] = true
			allowed[endpoints.DerivedServiceName(appNamespace, s)] = true
			for _, n := range m.names {
				allowed[s+"-"+n] = true
			}
		}
		for _, s := range list.Items {
			if !allowed[s.Name] || strings.Count(s.Name, "-") > 1 && !strings.HasPrefix(s.Name, "derived-") {
				t.Errorf("hub %s has Service %s: output of a daemon was imported", hub, s.Name)
			}
		}
	}
}
