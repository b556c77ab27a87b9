package endpoints

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// testExport returns an export of a defaulted ClusterIP Service created
// minute minutes after t0.
func testExport(cluster string, minute int, mutate func(*Export)) Export {
	svc := testSvc(
		corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
		corev1.ServicePort{Name: "grpc", Port: 9090, Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("grpc")},
	)
	svc.Spec.SessionAffinity = corev1.ServiceAffinityNone
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
	svc.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyCluster)
	e := Export{Cluster: cluster, Service: svc, Created: metav1.NewTime(t0.Add(time.Duration(minute) * time.Minute))}
	if mutate != nil {
		mutate(&e)
	}
	return e
}

func TestMergeImport(t *testing.T) {
	exported := func(e *Export) {
		e.ExportedLabels = map[string]string{"tier": "front", LabelManagedBy: "helm"}
		e.ExportedAnnotations = map[string]string{"owner": "payments"}
	}
	res := MergeImport(testNamespace, testService, []Export{testExport("west", 1, exported), testExport("east", 0, exported)})
	if len(res.Conflicts) != 0 {
		t.Errorf("conflicts: %+v", res.Conflicts)
	}
	want := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNamespace,
			Name:      testService,
			Labels:    map[string]string{"tier": "front", LabelManagedBy: ManagedByValue},
			Annotations: map[string]string{
				"owner":                       "payments",
				AnnotationDerivedService:      DerivedServiceName(testNamespace, testService),
				AnnotationExportedLabels:      "tier",
				AnnotationExportedAnnotations: "owner",
			},
		},
		Spec: mcsv1beta1.ServiceImportSpec{
			Ports: []mcsv1beta1.ServicePort{
				{Name: "grpc", Protocol: corev1.ProtocolTCP, Port: 9090, AppProtocol: ptr.To("grpc")},
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
			},
			Type:                  mcsv1beta1.ClusterSetIP,
			SessionAffinity:       corev1.ServiceAffinityNone,
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol},
			InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyCluster),
		},
		Status: mcsv1beta1.ServiceImportStatus{EndpointSliceObjects: mcsv1beta1.EndpointSliceObjectsPresent, Clusters: []mcsv1beta1.ClusterStatus{{Cluster: "east"}, {Cluster: "west"}}},
	}
	if !apiequality.Semantic.DeepEqual(res.Import, want) {
		t.Errorf("MergeImport() =\n%+v\nwant\n%+v", res.Import, want)
	}

	headless := MergeImport(testNamespace, testService, []Export{testExport("east", 0, func(e *Export) {
		e.Service.Spec.ClusterIP = corev1.ClusterIPNone
	})})
	if headless.Import.Spec.Type != mcsv1beta1.Headless {
		t.Errorf("type = %q, want Headless", headless.Import.Spec.Type)
	}
}

func TestMergeImportConflicts(t *testing.T) {
	timeout := func(s int32) *corev1.SessionAffinityConfig {
		return &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(s)}}
	}
	tests := []struct {
		name   string
		mutate func(*Export) // applied to the newer export
		reason ConflictReason
		check  func(*mcsv1beta1.ServiceImport) bool
	}{
		{"port number", func(e *Export) { e.Service.Spec.Ports[0].Port = 8080 }, PortConflict,
			func(i *mcsv1beta1.ServiceImport) bool { return i.Spec.Ports[1].Port == 80 }},
		{"port protocol", func(e *Export) { e.Service.Spec.Ports[0].Protocol = corev1.ProtocolUDP }, PortConflict,
			func(i *mcsv1beta1.ServiceImport) bool { return i.Spec.Ports[1].Protocol == corev1.ProtocolTCP }},
		{"port appProtocol", func(e *Export) { e.Service.Spec.Ports[1].AppProtocol = ptr.To("h2c") }, PortConflict,
			func(i *mcsv1beta1.ServiceImport) bool { return *i.Spec.Ports[0].AppProtocol == "grpc" }},
		{"port number reused under another name", func(e *Export) { e.Service.Spec.Ports[0].Name = "web" }, PortConflict,
			func(i *mcsv1beta1.ServiceImport) bool { return len(i.Spec.Ports) == 2 }},
		{"type", func(e *Export) { e.Service.Spec.ClusterIP = corev1.ClusterIPNone }, TypeConflict,
			func(i *mcsv1beta1.ServiceImport) bool { return i.Spec.Type == mcsv1beta1.ClusterSetIP }},
		{"session affinity", func(e *Export) {
			e.Service.Spec.SessionAffinity, e.Service.Spec.SessionAffinityConfig = corev1.ServiceAffinityClientIP, timeout(60)
		}, SessionAffinityConflict,
			func(i *mcsv1beta1.ServiceImport) bool { return i.Spec.SessionAffinity == corev1.ServiceAffinityNone }},
		{"session affinity config", nil, SessionAffinityConfigConflict,
			func(i *mcsv1beta1.ServiceImport) bool {
				return *i.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds == 60
			}},
		{"internal traffic policy", func(e *Export) {
			e.Service.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
		}, InternalTrafficPolicyConflict,
			func(i *mcsv1beta1.ServiceImport) bool {
				return *i.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyCluster
			}},
		{"traffic distribution", func(e *Export) { e.Service.Spec.TrafficDistribution = ptr.To("PreferClose") }, TrafficDistributionConflict,
			func(i *mcsv1beta1.ServiceImport) bool { return i.Spec.TrafficDistribution == nil }},
		{"ip families", func(e *Export) {
			e.Service.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
		}, IPFamilyConflict,
			func(i *mcsv1beta1.ServiceImport) bool { return i.Spec.IPFamilies[0] == corev1.IPv4Protocol }},
		{"labels", func(e *Export) { e.ExportedLabels = map[string]string{"tier": "back", "extra": "1"} }, LabelsConflict,
			func(i *mcsv1beta1.ServiceImport) bool {
				_, leaked := i.Labels["extra"]
				return i.Labels["tier"] == "front" && !leaked
			}},
		{"a label only the newer export has", func(e *Export) { e.ExportedLabels["extra"] = "1" }, LabelsConflict,
			func(i *mcsv1beta1.ServiceImport) bool { _, leaked := i.Labels["extra"]; return !leaked }},
		{"an annotation the newer export lacks", func(e *Export) { e.ExportedAnnotations = nil }, AnnotationsConflict,
			func(i *mcsv1beta1.ServiceImport) bool { return i.Annotations["owner"] == "payments" }},
		{"a port only the newer export has", func(e *Export) {
			e.Service.Spec.Ports = append(e.Service.Spec.Ports, corev1.ServicePort{Name: "metrics", Port: 9100, Protocol: corev1.ProtocolTCP})
		}, PortConflict,
			func(i *mcsv1beta1.ServiceImport) bool {
				return len(i.Spec.Ports) == 3 && i.Spec.Ports[2].Name == "metrics"
			}},
		{"annotations", func(e *Export) { e.ExportedAnnotations = map[string]string{"owner": "shop"} }, AnnotationsConflict,
			func(i *mcsv1beta1.ServiceImport) bool { return i.Annotations["owner"] == "payments" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			oldest := testExport("west", 0, func(e *Export) {
				e.ExportedLabels = map[string]string{"tier": "front"}
				e.ExportedAnnotations = map[string]string{"owner": "payments"}
			})
			newer := testExport("east", 5, func(e *Export) {
				e.ExportedLabels = map[string]string{"tier": "front"}
				e.ExportedAnnotations = map[string]string{"owner": "payments"}
			})
			third := testExport("north", 7, func(e *Export) {
				e.ExportedLabels = map[string]string{"tier": "front"}
				e.ExportedAnnotations = map[string]string{"owner": "payments"}
			})
			if tt.reason == SessionAffinityConfigConflict {
				for _, e := range []*Export{&oldest, &newer, &third} {
					e.Service.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
					e.Service.Spec.SessionAffinityConfig = timeout(60)
				}
				newer.Service.Spec.SessionAffinityConfig = timeout(30)
			} else {
				tt.mutate(&newer)
			}
			res := MergeImport(testNamespace, testService, []Export{newer, third, oldest})
			want := []Conflict{{Reason: tt.reason, Clusters: []string{"east"}}}
			if tt.name == "a port only the newer export has" {
				want[0].Clusters = []string{"north", "west"} // the ones that lack it
			}
			if len(res.Conflicts) != 1 || res.Conflicts[0].Reason != tt.reason || !slices.Equal(res.Conflicts[0].Clusters, want[0].Clusters) {
				t.Fatalf("conflicts = %+v, want %+v", res.Conflicts, want)
			}
			if msg := res.Conflicts[0].Message; !strings.Contains(msg, "east") || !strings.Contains(msg, "west") ||
				strings.Contains(msg, "north") != slices.Contains(want[0].Clusters, "north") {
				t.Errorf("message %q: want the clusters that disagree named, and no other", msg)
			}
			if !tt.check(res.Import) {
				t.Errorf("the oldest export's value is not used: %+v", res.Import)
			}
		})
	}
}

func TestMergeImportPortUnion(t *testing.T) {
	res := MergeImport(testNamespace, testService, []Export{
		testExport("a", 0, func(e *Export) {
			e.Service.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}
		}),
		testExport("b", 1, func(e *Export) {
			e.Service.Spec.Ports = []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
				{Name: "metrics", Port: 9100, Protocol: corev1.ProtocolTCP},
			}
		}),
		testExport("c", 2, func(e *Export) {
			e.Service.Spec.Ports = []corev1.ServicePort{
				{Name: "admin", Port: 8081}, // unset protocol reads as TCP
				{Name: "metrics", Port: 9200, Protocol: corev1.ProtocolTCP},
			}
		}),
	})
	wantPorts := []mcsv1beta1.ServicePort{
		{Name: "admin", Protocol: corev1.ProtocolTCP, Port: 8081},
		{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
		{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9100},
	}
	if !apiequality.Semantic.DeepEqual(res.Import.Spec.Ports, wantPorts) {
		t.Errorf("ports = %+v, want %+v", res.Import.Spec.Ports, wantPorts)
	}
	// Every export lacks a port of the union: all conflict.
	if len(res.Conflicts) != 1 || res.Conflicts[0].Reason != PortConflict || !slices.Equal(res.Conflicts[0].Clusters, []string{"a", "b", "c"}) {
		t.Fatalf("conflicts = %+v, want a PortConflict for a, b and c", res.Conflicts)
	}
	for _, part := range []string{
		`port "metrics": cluster(s) c differ from cluster b`,
		`port "admin" (8081/TCP): not exported by cluster(s) a, b; cluster c exports it`,
		`port "http" (80/TCP): not exported by cluster(s) c; cluster a exports it`,
	} {
		if msg := res.Conflicts[0].Message; !strings.Contains(msg, part) {
			t.Errorf("message %q lacks %q", msg, part)
		}
	}

	// Identical port sets: no conflict.
	same := MergeImport(testNamespace, testService, []Export{testExport("a", 0, nil), testExport("b", 1, nil)})
	if len(same.Conflicts) != 0 {
		t.Errorf("identical ports conflict: %+v", same.Conflicts)
	}
}

// permutations returns every ordering of list.
func permutations(list []Export) [][]Export {
	if len(list) <= 1 {
		return [][]Export{slices.Clone(list)}
	}
	var out [][]Export
	for i := range list {
		rest := append(slices.Clone(list[:i]), list[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]Export{list[i]}, p...))
		}
	}
	return out
}

func TestMergeImportOrderIndependent(t *testing.T) {
	exports := []Export{
		// b and a tie on time: a wins by name.
		testExport("b", 0, func(e *Export) {
			e.Service.Spec.Ports[0].Port = 81
			e.Service.Spec.ClusterIP = corev1.ClusterIPNone
			e.ExportedLabels = map[string]string{"tier": "b", "only-b": "1"}
		}),
		testExport("a", 0, func(e *Export) {
			e.ExportedLabels = map[string]string{"tier": "a"}
			e.ExportedAnnotations = map[string]string{"note": "a"}
		}),
		testExport("c", 3, func(e *Export) {
			e.Service.Spec.Ports = append(e.Service.Spec.Ports, corev1.ServicePort{Name: "extra", Port: 7000})
			e.Service.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			e.ExportedAnnotations = map[string]string{"note": "c"}
		}),
		testExport("d", 2, func(e *Export) {
			e.Service.Spec.Ports[0].Port = 82
			e.Service.Spec.TrafficDistribution = ptr.To("PreferClose")
			e.ExportedLabels = map[string]string{"tier": "d"}
		}),
	}
	want := MergeImport(testNamespace, testService, exports)
	if got := want.Import.Labels["tier"]; got != "a" {
		t.Errorf("tier = %q, want a's", got)
	}
	if len(want.Conflicts) == 0 {
		t.Fatal("want conflicts")
	}
	perms := permutations(exports)
	if len(perms) != 24 {
		t.Fatalf("%d permutations", len(perms))
	}
	for _, p := range perms {
		if got := MergeImport(testNamespace, testService, p); !reflect.DeepEqual(got, want) {
			t.Fatalf("result depends on export order:\n got %+v\nwant %+v", got, want)
		}
	}
	for _, c := range want.Conflicts {
		// a, the oldest, has the value used; only a port it lacks names it.
		if !slices.IsSorted(c.Clusters) || (c.Reason != PortConflict && slices.Contains(c.Clusters, "a")) {
			t.Errorf("conflict %+v: clusters must be the sorted losers", c)
		}
	}
	wantReasons := []ConflictReason{LabelsConflict, AnnotationsConflict, PortConflict, SessionAffinityConflict, TrafficDistributionConflict, TypeConflict}
	var reasons []ConflictReason
	for _, c := range want.Conflicts {
		reasons = append(reasons, c.Reason)
	}
	slices.Sort(wantReasons)
	if !slices.Equal(reasons, wantReasons) {
		t.Errorf("reasons = %v, want %v", reasons, wantReasons)
	}
}

func TestMergeImportDoesNotMutateInputs(t *testing.T) {
	exports := []Export{
		testExport("b", 1, func(e *Export) { e.ExportedLabels = map[string]string{"x": "1"} }),
		testExport("a", 0, func(e *Export) { e.Service.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{} }),
	}
	before := slices.Clone(exports)
	for i := range before {
		before[i].Service = exports[i].Service.DeepCopy()
		before[i].ExportedLabels = maps.Clone(exports[i].ExportedLabels)
	}
	res := MergeImport(testNamespace, testService, exports)
	res.Import.Labels["x"] = "scribble"
	res.Import.Spec.Ports[0].AppProtocol = nil
	*res.Import.Spec.InternalTrafficPolicy = "scribble"
	res.Import.Spec.IPFamilies[0] = "scribble"
	if exports[0].Cluster != "b" || !apiequality.Semantic.DeepEqual(exports, before) {
		t.Error("MergeImport modified its input")
	}
}

func TestImportUpToDate(t *testing.T) {
	desired := MergeImport(testNamespace, testService, []Export{testExport("east", 0, func(e *Export) {
		e.ExportedLabels = map[string]string{"tier": "front"}
		e.ExportedAnnotations = map[string]string{"owner": "payments"}
	})}).Import
	desired.Spec.IPs = []string{"10.100.0.1"}

	tests := []struct {
		name         string
		mutate       func(*mcsv1beta1.ServiceImport)
		want, status bool
	}{
		{"same", func(*mcsv1beta1.ServiceImport) {}, true, true},
		{"server fields and others' metadata", func(i *mcsv1beta1.ServiceImport) {
			i.ResourceVersion, i.UID = "3", "uid"
			i.Labels["team"] = "x"
			i.Annotations["note"] = "x"
			i.Status.Conditions = []metav1.Condition{{Type: "Ready"}}
			i.Spec.Ports[0].Protocol = ""
		}, true, true},
		{"stale exported label", func(i *mcsv1beta1.ServiceImport) {
			i.Labels["old"] = "x"
			i.Annotations[AnnotationExportedLabels] = "old,tier"
		}, false, true},
		{"exported annotation changed", func(i *mcsv1beta1.ServiceImport) { i.Annotations["owner"] = "shop" }, false, true},
		{"derived service annotation", func(i *mcsv1beta1.ServiceImport) { delete(i.Annotations, AnnotationDerivedService) }, false, true},
		{"IPs", func(i *mcsv1beta1.ServiceImport) { i.Spec.IPs = nil }, false, true},
		{"ports", func(i *mcsv1beta1.ServiceImport) { i.Spec.Ports = i.Spec.Ports[1:] }, false, true},
		{"type", func(i *mcsv1beta1.ServiceImport) { i.Spec.Type = mcsv1beta1.Headless }, false, true},
		{"traffic distribution", func(i *mcsv1beta1.ServiceImport) { i.Spec.TrafficDistribution = ptr.To("PreferClose") }, false, true},
		{"clusters order", func(i *mcsv1beta1.ServiceImport) {
			i.Status.Clusters = []mcsv1beta1.ClusterStatus{{Cluster: "east"}}
		}, true, true},
		{"clusters", func(i *mcsv1beta1.ServiceImport) {
			i.Status.Clusters = append(i.Status.Clusters, mcsv1beta1.ClusterStatus{Cluster: "west"})
		}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			live := desired.DeepCopy()
			tt.mutate(live)
			if got := ImportUpToDate(desired, live); got != tt.want {
				t.Errorf("ImportUpToDate() = %v, want %v", got, tt.want)
			}
			if got := ImportStatusUpToDate(desired, live); got != tt.status {
				t.Errorf("ImportStatusUpToDate() = %v, want %v", got, tt.status)
			}
			before := live.DeepCopy()
			merged := MergeServiceImport(desired, live)
			if !ImportUpToDate(desired, merged) {
				t.Errorf("MergeServiceImport() result not up to date: %+v", merged)
			}
			if _, ok := merged.Labels["old"]; ok {
				t.Error("MergeServiceImport() kept a label no longer exported")
			}
			if merged.Labels["team"] != live.Labels["team"] || merged.Annotations["note"] != live.Annotations["note"] ||
				!reflect.DeepEqual(merged.Status.Conditions, live.Status.Conditions) {
				t.Errorf("MergeServiceImport() dropped others' fields: %+v", merged)
			}
			if !apiequality.Semantic.DeepEqual(live, before) {
				t.Error("MergeServiceImport modified live")
			}
		})
	}
}

// A Service has one unnamed port or only named ones: an export that would
// mix them into the union loses its port, whichever side is older.
func TestMergeImportNeverMixesUnnamedAndNamedPorts(t *testing.T) {
	unnamed := []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}
	named := []corev1.ServicePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}}
	for _, tc := range []struct {
		name        string
		first, then []corev1.ServicePort
	}{{"unnamed first", unnamed, named}, {"named first", named, unnamed}} {
		t.Run(tc.name, func(t *testing.T) {
			for _, exports := range permutations([]Export{
				testExport("east", 0, func(e *Export) { e.Service.Spec.Ports = tc.first }),
				testExport("west", 1, func(e *Export) { e.Service.Spec.Ports = tc.then }),
			}) {
				res := MergeImport(testNamespace, testService, exports)
				ports := res.Import.Spec.Ports
				if len(ports) != 1 || ports[0].Name != tc.first[0].Name || ports[0].Port != tc.first[0].Port {
					t.Errorf("ports = %+v, want the oldest export's %+v only", ports, tc.first)
				}
				if len(res.Conflicts) != 1 || res.Conflicts[0].Reason != PortConflict || !slices.Equal(res.Conflicts[0].Clusters, []string{"west"}) {
					t.Errorf("conflicts = %+v, want a PortConflict for west", res.Conflicts)
				}
			}
		})
	}
}
