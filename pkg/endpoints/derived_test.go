package endpoints

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

func testImport(typ mcsv1beta1.ServiceImportType, families ...corev1.IPFamily) *mcsv1beta1.ServiceImport {
	return &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testService, UID: "import-uid"},
		Spec: mcsv1beta1.ServiceImportSpec{
			Type: typ,
			Ports: []mcsv1beta1.ServicePort{
				{Name: "grpc", Protocol: corev1.ProtocolTCP, Port: 9090, AppProtocol: ptr.To("grpc")},
				{Name: "http", Port: 80},
			},
			SessionAffinity:       corev1.ServiceAffinityClientIP,
			SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](30)}},
			IPFamilies:            families,
			InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyLocal),
			TrafficDistribution:   ptr.To("PreferClose"),
			IPs:                   []string{"10.100.0.1"},
		},
	}
}

func TestDerivedService(t *testing.T) {
	ports := []corev1.ServicePort{
		{Name: "grpc", Protocol: corev1.ProtocolTCP, Port: 9090, AppProtocol: ptr.To("grpc"), TargetPort: intstr.FromInt32(9090)},
		{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(80)},
	}
	spec := func(clusterIP string, policy *corev1.IPFamilyPolicy, families ...corev1.IPFamily) corev1.ServiceSpec {
		return corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeClusterIP,
			ClusterIP:             clusterIP,
			Ports:                 ports,
			SessionAffinity:       corev1.ServiceAffinityClientIP,
			SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](30)}},
			IPFamilies:            families,
			IPFamilyPolicy:        policy,
			InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyLocal),
			TrafficDistribution:   ptr.To("PreferClose"),
		}
	}
	tests := []struct {
		name string
		imp  *mcsv1beta1.ServiceImport
		want corev1.ServiceSpec
	}{
		{"ClusterSetIP", testImport(mcsv1beta1.ClusterSetIP, corev1.IPv4Protocol),
			spec("", ptr.To(corev1.IPFamilyPolicySingleStack), corev1.IPv4Protocol)},
		{"Headless", testImport(mcsv1beta1.Headless, corev1.IPv6Protocol),
			spec(corev1.ClusterIPNone, ptr.To(corev1.IPFamilyPolicySingleStack), corev1.IPv6Protocol)},
		{"dual stack", testImport(mcsv1beta1.ClusterSetIP, corev1.IPv6Protocol, corev1.IPv4Protocol),
			spec("", ptr.To(corev1.IPFamilyPolicyRequireDualStack), corev1.IPv6Protocol, corev1.IPv4Protocol)},
		{"no families", testImport(mcsv1beta1.ClusterSetIP), spec("", nil)},
		{"no ports: headless, as the API takes no ClusterIP Service without one", func() *mcsv1beta1.ServiceImport {
			imp := testImport(mcsv1beta1.ClusterSetIP, corev1.IPv4Protocol)
			imp.Spec.Ports = nil
			return imp
		}(), func() corev1.ServiceSpec {
			s := spec(corev1.ClusterIPNone, ptr.To(corev1.IPFamilyPolicySingleStack), corev1.IPv4Protocol)
			s.Ports = nil
			return s
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.imp.DeepCopy()
			got := DerivedService(tt.imp)
			want := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: testNamespace,
					Name:      DerivedServiceName(testNamespace, testService),
					Labels:    map[string]string{mcsv1beta1.LabelServiceName: testService, LabelManagedBy: ManagedByValue},
				},
				Spec: tt.want,
			}
			if !apiequality.Semantic.DeepEqual(got, want) {
				t.Errorf("DerivedService() =\n%+v\nwant\n%+v", got, want)
			}
			if !apiequality.Semantic.DeepEqual(tt.imp, before) {
				t.Error("DerivedService modified the import")
			}
		})
	}
}

func TestDerivedServiceUpToDate(t *testing.T) {
	desired := DerivedService(testImport(mcsv1beta1.ClusterSetIP, corev1.IPv4Protocol))
	tests := []struct {
		name     string
		mutate   func(*corev1.Service)
		want     bool
		recreate bool
	}{
		{name: "server defaults", mutate: func(*corev1.Service) {}, want: true},
		{name: "owner reference and others' labels", mutate: func(s *corev1.Service) {
			s.OwnerReferences = []metav1.OwnerReference{{Kind: "ServiceImport", Name: testService, UID: "import-uid"}}
			s.Labels["team"] = "x"
		}, want: true},
		{name: "our label", mutate: func(s *corev1.Service) { s.Labels[mcsv1beta1.LabelServiceName] = "api" }},
		{name: "internal traffic policy", mutate: func(s *corev1.Service) {
			s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyCluster)
		}},
		{name: "traffic distribution", mutate: func(s *corev1.Service) { s.Spec.TrafficDistribution = nil }},
		{name: "ip family policy", mutate: func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyPreferDualStack)
		}},
		{name: "secondary family", mutate: func(s *corev1.Service) {
			s.Spec.IPFamilies = append(s.Spec.IPFamilies, corev1.IPv6Protocol)
		}},
		{name: "primary family", mutate: func(s *corev1.Service) {
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
		}, recreate: true},
		{name: "headless", mutate: func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }, recreate: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			live := liveService(desired)
			tt.mutate(live)
			if got := DerivedServiceUpToDate(desired, live); got != tt.want {
				t.Errorf("DerivedServiceUpToDate() = %v, want %v", got, tt.want)
			}
			if got := ServiceNeedsRecreate(desired, live); got != tt.recreate {
				t.Errorf("ServiceNeedsRecreate() = %v, want %v", got, tt.recreate)
			}
			if tt.recreate {
				return
			}
			before := live.DeepCopy()
			merged := MergeDerivedService(desired, live)
			if !DerivedServiceUpToDate(desired, merged) {
				t.Errorf("MergeDerivedService() result not up to date: %+v", merged)
			}
			if merged.Spec.ClusterIP != live.Spec.ClusterIP || merged.ResourceVersion != live.ResourceVersion ||
				len(merged.OwnerReferences) != len(live.OwnerReferences) || merged.Labels["team"] != live.Labels["team"] {
				t.Errorf("MergeDerivedService() dropped live fields: %+v", merged)
			}
			if !apiequality.Semantic.DeepEqual(live, before) {
				t.Error("MergeDerivedService modified live")
			}
		})
	}
}

// TestImportIPsOfAHeadlessDerivedService: a derived Service made headless
// for want of ports gives its import no IP ("None" is not one).
func TestImportIPsOfAHeadlessDerivedService(t *testing.T) {
	imp := testImport(mcsv1beta1.ClusterSetIP, corev1.IPv4Protocol)
	svc := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, ClusterIPs: []string{corev1.ClusterIPNone}, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}}}
	if got := ImportIPs(imp, svc); len(got) != 0 {
		t.Errorf("ImportIPs of a headless derived Service = %v, want none", got)
	}
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "10.96.0.7", []string{"10.96.0.7"}
	if got := ImportIPs(imp, svc); len(got) != 1 || got[0] != "10.96.0.7" {
		t.Errorf("ImportIPs = %v, want [10.96.0.7]", got)
	}
}
