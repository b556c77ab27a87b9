package explain

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func svc(port int32) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{{Name: "http", Port: port, Protocol: corev1.ProtocolTCP}}}}
}

func export(age time.Duration) *mcsv1beta1.ServiceExport {
	return &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart", CreationTimestamp: metav1.NewTime(now.Add(-age))}}
}

// hubSlice is the MCS slice the daemon would write for member m.
func hubSlice(cluster string, s *corev1.Service, se *mcsv1beta1.ServiceExport, ready int) *discoveryv1.EndpointSlice {
	rec := endpoints.ExportRecord(endpoints.Export{Cluster: cluster, Service: s, Created: se.CreationTimestamp})
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart-" + cluster,
		Labels: endpoints.SliceLabels("shop", "cart", cluster), Annotations: map[string]string{endpoints.AnnotationExportRecord: rec}}}
	for i := range ready {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0." + string(rune('1'+i))}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return sl
}

func lease(renewed time.Duration) *coordinationv1.Lease {
	return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: now.Add(-renewed)}, LeaseDurationSeconds: ptr.To[int32](40)}}
}

func imported(clusters ...string) *mcsv1beta1.ServiceImport {
	imp := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart", Labels: map[string]string{endpoints.LabelManagedBy: endpoints.ManagedByValue}},
		Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	for _, c := range clusters {
		imp.Status.Clusters = append(imp.Status.Clusters, mcsv1beta1.ClusterStatus{Cluster: c})
	}
	return imp
}

// healthy is a member that exports cart with port and whose export the hub
// holds.
func healthy(name string, port int32, age time.Duration) Member {
	s, se := svc(port), export(age)
	return Member{Name: name, Secret: name, Lease: lease(time.Second), Read: true, Service: s, Export: se,
		Slices:    memberSlices("10.1.0.1"),
		HubSlices: []*discoveryv1.EndpointSlice{hubSlice(name, s, se, 1)}}
}

// memberSlices returns the projection of a member IPv4 slice holding addrs,
// as the explain command reads it.
func memberSlices(addrs ...string) []*endpoints.MemberSlice {
	sl := &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4}
	for _, a := range addrs {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
	}
	return []*endpoints.MemberSlice{endpoints.ProjectSlice(sl)}
}

func TestBuildVerdicts(t *testing.T) {
	base := func() Input {
		return Input{Namespace: "shop", Name: "cart", Now: now, HubNamespace: true,
			Policy: Policy{Export: easync.ExportPolicy{Mode: easync.ExportServiceExport, Exclude: sets.New("kube-system")}}, Import: imported("east")}
	}
	cases := []struct {
		name   string
		mutate func(*Input)
		want   string // a part of east's verdict
	}{
		{"imported", func(in *Input) { in.Members = []Member{healthy("east", 80, time.Hour)} }, "imported: 1 endpoint(s) in the hub, 1 ready"},
		{"namespace excluded", func(in *Input) {
			in.Namespace = "kube-system"
			in.Members = []Member{healthy("east", 80, time.Hour)}
		}, "not exported: namespace kube-system is excluded by --exclude-namespaces"},
		{"namespace not included", func(in *Input) {
			in.Policy.Export.Include = sets.New("billing")
			in.Members = []Member{healthy("east", 80, time.Hour)}
		}, "not exported: namespace shop is not in --include-namespaces"},
		{"no ServiceExport", func(in *Input) {
			m := healthy("east", 80, time.Hour)
			m.Export, m.HubSlices = nil, nil
			in.Members, in.Import = []Member{m}, nil
		}, "not exported: no ServiceExport shop/cart in this cluster"},
		{"no annotation", func(in *Input) {
			in.Policy.Export.Mode = easync.ExportAnnotation
			m := healthy("east", 80, time.Hour)
			m.HubSlices = nil
			in.Members, in.Import = []Member{m}, nil
		}, `lacks the annotation endpoint-aggregator.io/export: "true"`},
		{"no Service", func(in *Input) {
			m := healthy("east", 80, time.Hour)
			m.Service, m.HubSlices = nil, nil
			in.Members, in.Import = []Member{m}, nil
		}, "not exported: the ServiceExport has no Service of that name"},
		{"ExternalName", func(in *Input) {
			m := healthy("east", 80, time.Hour)
			m.Service.Spec.Type = corev1.ServiceTypeExternalName
			m.HubSlices = nil
			in.Members, in.Import = []Member{m}, nil
		}, "not exported: ExternalName Services cannot be exported"},
		{"hub namespace missing", func(in *Input) {
			m := healthy("east", 80, time.Hour)
			m.HubSlices = nil
			in.Members, in.Import, in.HubNamespace = []Member{m}, nil, false
		}, "not imported: hub namespace shop does not exist (start the daemon with --create-namespaces or create it)"},
		{"import not ours", func(in *Input) {
			in.Members = []Member{healthy("east", 80, time.Hour)}
			in.Import.Labels = nil
		}, "not imported: the hub's ServiceImport shop/cart is not managed by endpoint-aggregator"},
		{"no record yet", func(in *Input) {
			m := healthy("east", 80, time.Hour)
			m.HubSlices = nil
			in.Members, in.Import = []Member{m}, nil
		}, "pending: the hub holds no slices of this cluster yet"},
		{"the hub refuses its objects", func(in *Input) {
			m := healthy("east", 80, time.Hour)
			m.HubSlices = nil
			m.SyncError = `cluster east: writing its hub objects of shop/cart fails, retrying: EndpointSlice.discovery.k8s.io "x" is invalid: metadata.annotations: Too long`
			in.Members, in.Import = []Member{m}, nil
		}, "failing: cluster east: writing its hub objects of shop/cart fails, retrying: EndpointSlice.discovery.k8s.io \"x\" is invalid"},
		{"port conflict", func(in *Input) {
			in.Members = []Member{healthy("east", 8080, time.Minute), healthy("west", 80, time.Hour)}
			in.Import = imported("east", "west")
		}, "conflict: port http is 8080/TCP here and 80/TCP in the import, from the oldest export, so this cluster's MCS slices leave it out"},
		{"unreachable, kept", func(in *Input) {
			m := healthy("east", 80, time.Hour)
			m.Lease, m.Read = lease(5*time.Minute), false
			in.Members = []Member{m}
		}, "stale: member unreachable for 5m0s; its endpoints are kept (policy keep)"},
		{"hung, seen by the daemon before its Lease lapses", func(in *Input) {
			m := healthy("east", 80, time.Hour)
			m.Lease = lease(5 * time.Second)
			m.Lease.Annotations = map[string]string{easync.AnnotationReachable: "false", easync.AnnotationReachableSince: now.Add(-3 * time.Second).Format(time.RFC3339),
				easync.AnnotationErrorReason: "Timeout", easync.AnnotationErrorMessage: "context deadline exceeded"}
			m.ReadError, m.Service, m.Export = "context deadline exceeded", nil, nil
			in.Members = []Member{m}
		}, "stale: member unreachable for 3s (Timeout: context deadline exceeded); its endpoints are kept (policy keep)"},
		{"reachable again while its Lease is live", func(in *Input) {
			m := healthy("east", 80, time.Hour)
			m.Lease.Annotations = map[string]string{easync.AnnotationReachable: "true", easync.AnnotationReachableSince: now.Add(-time.Minute).Format(time.RFC3339)}
			in.Members = []Member{m}
		}, "imported: 1 endpoint(s) in the hub"},
		{"unreachable, withdrawn by the Secret's policy", func(in *Input) {
			m := healthy("east", 80, time.Hour)
			m.Lease, m.UnreachableWithdraw = lease(5*time.Minute), ptr.To(2*time.Minute)
			in.Members = []Member{m}
		}, "its endpoints are withdrawn (policy withdraw after 2m0s)"},
		{"not readable", func(in *Input) {
			m := healthy("east", 80, time.Hour)
			m.ReadError, m.Service, m.Export, m.HubSlices = "connection refused", nil, nil, nil
			in.Members, in.Import = []Member{m}, nil
		}, "unknown: the member could not be read (connection refused)"},
		{"the API server's Service", func(in *Input) {
			in.Namespace, in.Name = "default", "kubernetes"
			m := healthy("east", 443, time.Hour)
			m.Service.Namespace, m.Service.Name = "default", "kubernetes"
			m.HubSlices = nil
			in.Members, in.Import = []Member{m}, nil
		}, "not exported: default/kubernetes is the cluster's API server, never exported"},
		{"the daemon's own namespace", func(in *Input) {
			in.Namespace, in.Policy.Export.Own = "endpoint-aggregator", "endpoint-aggregator"
			in.Members = []Member{healthy("east", 80, time.Hour)}
		}, "not exported: namespace endpoint-aggregator is the daemon's own (--namespace); list it in --include-namespaces"},
		{"refused endpoints", func(in *Input) {
			in.Policy.Addresses.HubServiceRanges = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}
			m := healthy("east", 80, time.Hour)
			m.Slices = memberSlices("10.1.0.1", "10.96.0.1", "169.254.169.254")
			in.Members = []Member{m}
		}, "imported: 1 endpoint(s) in the hub, 1 ready; 2 refused: 1 special_address, 1 hub_service_range: 10.96.0.1 (inside the hub's Service range 10.96.0.0/12), 169.254.169.254 (link-local address)"},
		{"refused by the registration's ranges", func(in *Input) {
			m := healthy("east", 80, time.Hour)
			m.AllowedEndpoints = []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}
			in.Members = []Member{m}
		}, "1 refused: 1 not_allowed_range: 10.1.0.1 (outside the allowed ranges of the member's registration)"},
		{"per-cluster name taken", func(in *Input) {
			m := healthy("east", 80, time.Hour)
			m.HubServiceTaken = true
			in.Members = []Member{m}
		}, "the hub Service shop/cart-east is not managed by endpoint-aggregator"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.mutate(&in)
			r := Build(in)
			if got := r.Members[0].Verdict; !strings.Contains(got, tc.want) {
				t.Errorf("east's verdict %q, want it to contain %q", got, tc.want)
			}
			if m := in.Members[0]; m.ReadError != "" && (r.Members[0].ReadError != m.ReadError || r.Members[0].Connected != "False") {
				t.Errorf("a member not read: row %+v", r.Members[0])
			}
		})
	}
}

func TestBuildSummarizesTheImport(t *testing.T) {
	in := Input{Namespace: "shop", Name: "cart", Now: now, HubNamespace: true, Policy: Policy{Export: easync.ExportPolicy{Mode: easync.ExportServiceExport}},
		Import: imported("east", "west"), Members: []Member{healthy("west", 80, time.Hour), healthy("east", 80, time.Minute)}}
	in.Import.Spec.IPs = []string{"10.96.0.10"}
	in.Derived = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: endpoints.DerivedServiceName("shop", "cart")}, Spec: corev1.ServiceSpec{ClusterIPs: []string{"10.96.0.10"}}}
	r := Build(in)
	if len(r.Members) != 2 || r.Members[0].Cluster != "east" {
		t.Fatalf("members %+v, want east then west", r.Members)
	}
	if r.Import == nil || strings.Join(r.Import.Clusters, ",") != "east,west" || r.Import.Ports[0] != "http:80/TCP" ||
		!strings.HasPrefix(r.Import.Derived, "derived-") {
		t.Errorf("import %+v", r.Import)
	}
	if r.Members[0].Connected != "True" || r.Members[0].Healthy != "True" || r.Members[0].Ready != 1 || r.Members[0].Export != "ServiceExport" {
		t.Errorf("east row %+v", r.Members[0])
	}
	none := Build(Input{Namespace: "shop", Name: "cart", Now: now, HubNamespace: true, Policy: Policy{Export: easync.ExportPolicy{Mode: easync.ExportServiceExport}}})
	if none.Import != nil || !strings.Contains(none.ImportMissing, "no cluster exports it") {
		t.Errorf("without exports: %+v", none)
	}
}

func TestBuildFlagsVerdictsTheHubContradicts(t *testing.T) {
	base := func() Input {
		return Input{Namespace: "shop", Name: "cart", Now: now, HubNamespace: true,
			Policy: Policy{Export: easync.ExportPolicy{Mode: easync.ExportServiceExport}}, Import: imported("east")}
	}
	cases := []struct {
		name   string
		mutate func(*Input)
		want   string // "" for no contradiction
	}{
		{"not exported by the assumed mode, yet the hub holds its endpoints", func(in *Input) {
			m := healthy("east", 80, time.Hour)
			m.Export = nil // exported by annotation, say, not by ServiceExport
			m.HubSlices[0].Endpoints = append(m.HubSlices[0].Endpoints, m.HubSlices[0].Endpoints[0], m.HubSlices[0].Endpoints[0])
			in.Members = []Member{m}
		}, "not exported: no ServiceExport shop/cart in this cluster (--export-mode=serviceexport); but the hub holds 3 endpoint(s) from east for shop/cart: the daemon's configuration may differ from what explain assumed"},
		{"namespace excluded by the assumed lists, yet the hub holds its per-cluster Endpoints", func(in *Input) {
			in.Policy.Export.Exclude = sets.New("shop")
			m := healthy("east", 80, time.Hour)
			m.HubSlices = nil
			m.HubEndpoints = &corev1.Endpoints{Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "10.1.0.1"}}, NotReadyAddresses: []corev1.EndpointAddress{{IP: "10.1.0.2"}}}}}
			in.Members = []Member{m}
		}, "but the hub holds 2 endpoint(s) from east for shop/cart"},
		{"exported as assumed, member healthy, yet the hub holds nothing", func(in *Input) {
			m := healthy("east", 80, time.Hour)
			m.HubSlices = nil
			in.Members, in.Import = []Member{m}, nil
		}, "pending: the hub holds no slices of this cluster yet (is the daemon running, and leading?); but the daemon renews east's Lease and the hub holds nothing from it for shop/cart: if this lasts, the daemon's configuration may differ"},
		{"not exported and nothing in the hub: consistent", func(in *Input) {
			m := healthy("east", 80, time.Hour)
			m.Export, m.HubSlices = nil, nil
			in.Members, in.Import = []Member{m}, nil
		}, ""},
		{"imported: consistent", func(in *Input) { in.Members = []Member{healthy("east", 80, time.Hour)} }, ""},
		{"pending without a Lease: no claim", func(in *Input) {
			m := healthy("east", 80, time.Hour)
			m.HubSlices, m.Lease = nil, nil
			in.Members, in.Import = []Member{m}, nil
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.mutate(&in)
			row := Build(in).Members[0]
			if tc.want == "" {
				if row.Contradicted || strings.Contains(row.Verdict, "may differ") {
					t.Errorf("verdict %q flagged as contradicted", row.Verdict)
				}
				return
			}
			if !row.Contradicted || !strings.Contains(row.Verdict, tc.want) {
				t.Errorf("verdict %q (contradicted %v), want it to contain %q", row.Verdict, row.Contradicted, tc.want)
			}
		})
	}
}

// The registration column says whether the member's own About API id, as
// the daemon published it, agrees with its name.
func TestRegistrationSaysWhetherTheAboutAPIIdAgrees(t *testing.T) {
	for _, tc := range []struct{ id, want string }{
		{"", "Secret east"},
		{"east", "Secret east (About API id agrees)"},
		{"west", `Secret east (About API id "west": refused)`},
	} {
		m := healthy("east", 80, time.Hour)
		if tc.id != "" {
			m.Lease.Annotations = map[string]string{easync.AnnotationAboutID: tc.id}
		}
		r := Build(Input{Namespace: "shop", Name: "cart", Now: now, HubNamespace: true, Members: []Member{m}, Import: imported("east"),
			Policy: Policy{Export: easync.ExportPolicy{Mode: easync.ExportServiceExport}}})
		if len(r.Members) != 1 || r.Members[0].Registration != tc.want {
			t.Errorf("about id %q: registration %+v, want %q", tc.id, r.Members, tc.want)
		}
	}
}

// A member serving no ServiceExport CRD is not failing: its row says the
// resource is not served, whether explain read the member or only the
// version the daemon published on its Lease.
func TestExportColumnSaysServiceExportNotServed(t *testing.T) {
	for _, tc := range []struct {
		name           string
		read, annotate string
		wantExport     string
	}{
		{"read from the member", lifecycle.ExportNotServed, "", "ServiceExport not served"},
		{"from the daemon's Lease", "", lifecycle.ExportNotServed, "ServiceExport not served"},
		{"v1alpha1 export", "v1alpha1", "", "ServiceExport (v1alpha1)"},
		{"v1beta1 export", "v1beta1", "", "ServiceExport"},
	} {
		m := healthy("east", 80, time.Hour)
		m.ExportVersion = tc.read
		if tc.annotate != "" {
			m.Lease.Annotations = map[string]string{easync.AnnotationServiceExportVersion: tc.annotate}
		}
		if tc.wantExport == "ServiceExport not served" {
			m.Export, m.HubSlices = nil, nil
		}
		r := Build(Input{Namespace: "shop", Name: "cart", Now: now, HubNamespace: true, Members: []Member{m},
			Policy: Policy{Export: easync.ExportPolicy{Mode: easync.ExportServiceExport}}})
		if len(r.Members) != 1 || r.Members[0].Export != tc.wantExport {
			t.Errorf("%s: rows %+v, want export %q", tc.name, r.Members, tc.wantExport)
			continue
		}
		if tc.wantExport == "ServiceExport not served" && !strings.Contains(r.Members[0].Verdict, "ServiceExport not served") {
			t.Errorf("%s: verdict %q, want it to say ServiceExport not served", tc.name, r.Members[0].Verdict)
		}
	}
}
