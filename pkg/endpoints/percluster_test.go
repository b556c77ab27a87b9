package endpoints

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestParsePerClusterMode(t *testing.T) {
	for _, s := range []string{"mirror", "headless", "off"} {
		if m, err := ParsePerClusterMode(s); err != nil || string(m) != s {
			t.Errorf("ParsePerClusterMode(%q) = %q, %v", s, m, err)
		}
	}
	for _, s := range []string{"", "Mirror", "none"} {
		if _, err := ParsePerClusterMode(s); err == nil {
			t.Errorf("ParsePerClusterMode(%q) succeeded", s)
		}
	}
}

func TestPerClusterService(t *testing.T) {
	wantLabels := map[string]string{LabelManagedBy: ManagedByValue, LabelServiceName: testService, LabelSourceCluster: testCluster}
	wantPorts := []corev1.ServicePort{
		{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(80), AppProtocol: ptr.To("http")},
		{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
	}
	member := func(mutate func(*corev1.Service)) *corev1.Service {
		svc := testSvc(
			corev1.ServicePort{Name: "http", Port: 80, TargetPort: intstr.FromString("web"), AppProtocol: ptr.To("http"), NodePort: 30080},
			corev1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(5353)},
		)
		svc.Spec.Selector = map[string]string{"app": "web"}
		svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
		svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		svc.Spec.ExternalIPs = []string{"192.0.2.1"}
		if mutate != nil {
			mutate(svc)
		}
		return svc
	}
	spec := func(clusterIP string) corev1.ServiceSpec {
		return corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: clusterIP, Ports: wantPorts}
	}
	tests := []struct {
		name    string
		service *corev1.Service
		mode    PerClusterMode
		want    corev1.ServiceSpec
	}{
		{name: "mirror ClusterIP", service: member(nil), mode: PerClusterMirror, want: spec("")},
		{name: "headless mode", service: member(nil), mode: PerClusterHeadless, want: spec(corev1.ClusterIPNone)},
		{name: "mirror headless", service: member(func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
		}), mode: PerClusterMirror, want: spec(corev1.ClusterIPNone)},
		{name: "no ports: headless, as the API takes no ClusterIP Service without one", service: member(func(s *corev1.Service) { s.Spec.Ports = nil }),
			mode: PerClusterMirror, want: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: corev1.ClusterIPNone}},
		{name: "NodePort becomes ClusterIP", service: member(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }), mode: PerClusterMirror, want: spec("")},
		{name: "LoadBalancer becomes ClusterIP", service: member(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = 31000
		}), mode: PerClusterMirror, want: spec("")},
		{name: "session affinity", service: member(func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
		}), mode: PerClusterMirror, want: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, Ports: wantPorts,
			SessionAffinity:       corev1.ServiceAffinityClientIP,
			SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.service.DeepCopy()
			got := PerClusterService(Source{Cluster: testCluster, Service: tt.service}, tt.mode)
			want := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "web-east", Labels: wantLabels},
				Spec:       tt.want,
			}
			if !apiequality.Semantic.DeepEqual(got, want) {
				t.Errorf("PerClusterService() =\n%+v\nwant\n%+v", got, want)
			}
			if !apiequality.Semantic.DeepEqual(tt.service, before) {
				t.Error("PerClusterService modified the member Service")
			}
		})
	}

	if got := PerClusterService(testSource(), PerClusterOff); got != nil {
		t.Errorf("off: got %v, want nil", got)
	}

	long := testSvc(svcPort("http", 80))
	long.Name = strings.Repeat("w", 60)
	got := PerClusterService(Source{Cluster: testCluster, Service: long}, PerClusterMirror)
	if want := testCluster + "/" + testNamespace + "/" + long.Name; got.Annotations[AnnotationSource] != want || len(got.Name) > 63 {
		t.Errorf("shortened: name %q, annotations %v", got.Name, got.Annotations)
	}
}

// liveService returns svc as the API server would return it.
func liveService(svc *corev1.Service) *corev1.Service {
	live := svc.DeepCopy()
	live.ResourceVersion, live.UID = "42", "uid"
	live.CreationTimestamp = metav1.Now()
	live.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "endpoint-aggregator"}}
	if live.Spec.ClusterIP == "" {
		live.Spec.ClusterIP = "10.100.0.7"
	}
	live.Spec.ClusterIPs = []string{live.Spec.ClusterIP}
	if len(live.Spec.IPFamilies) == 0 {
		live.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	}
	if live.Spec.IPFamilyPolicy == nil {
		live.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
	}
	if live.Spec.InternalTrafficPolicy == nil {
		live.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyCluster)
	}
	if live.Spec.SessionAffinity == "" {
		live.Spec.SessionAffinity = corev1.ServiceAffinityNone
	}
	if live.Spec.SessionAffinity == corev1.ServiceAffinityClientIP && live.Spec.SessionAffinityConfig == nil {
		live.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(corev1.DefaultClientIPServiceAffinitySeconds)}}
	}
	for i := range live.Spec.Ports {
		if live.Spec.Ports[i].Protocol == "" {
			live.Spec.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	live.Labels["team"] = "payments"
	return live
}

func TestServiceUpToDate(t *testing.T) {
	member := testSvc(corev1.ServicePort{Name: "http", Port: 80})
	member.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	desired := PerClusterService(Source{Cluster: testCluster, Service: member}, PerClusterMirror)
	tests := []struct {
		name     string
		mutate   func(*corev1.Service)
		want     bool
		recreate bool
	}{
		{name: "server defaults", mutate: func(*corev1.Service) {}, want: true},
		{name: "our label changed", mutate: func(s *corev1.Service) { s.Labels[LabelSourceCluster] = "west" }},
		{name: "source annotation added", mutate: func(s *corev1.Service) { s.Annotations = map[string]string{AnnotationSource: "x/y/z"} }},
		{name: "others' annotation", mutate: func(s *corev1.Service) { s.Annotations = map[string]string{"note": "x"} }, want: true},
		{name: "type", mutate: func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort; s.Spec.Ports[0].NodePort = 30000 }},
		{name: "selector", mutate: func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "web"} }},
		{name: "port", mutate: func(s *corev1.Service) { s.Spec.Ports[0].Port = 81 }},
		{name: "affinity timeout", mutate: func(s *corev1.Service) { s.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds = ptr.To[int32](5) }},
		{name: "headless", mutate: func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }, recreate: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			live := liveService(desired)
			tt.mutate(live)
			if got := ServiceUpToDate(desired, live); got != tt.want {
				t.Errorf("ServiceUpToDate() = %v, want %v", got, tt.want)
			}
			if got := ServiceNeedsRecreate(desired, live); got != tt.recreate {
				t.Errorf("ServiceNeedsRecreate() = %v, want %v", got, tt.recreate)
			}
			if tt.recreate {
				return
			}
			before := live.DeepCopy()
			merged := MergeService(desired, live)
			if !ServiceUpToDate(desired, merged) {
				t.Errorf("MergeService() result is not up to date: %+v", merged)
			}
			if !apiequality.Semantic.DeepEqual(live, before) {
				t.Error("MergeService modified live")
			}
			if merged.ResourceVersion != "42" || merged.Spec.ClusterIP != live.Spec.ClusterIP || merged.Labels["team"] != "payments" {
				t.Errorf("MergeService() dropped live fields: %+v", merged)
			}
		})
	}
}

func TestServiceNeedsRecreateIPFamily(t *testing.T) {
	desired := &corev1.Service{Spec: corev1.ServiceSpec{IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol}}}
	live := &corev1.Service{Spec: corev1.ServiceSpec{IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}}}
	if !ServiceNeedsRecreate(desired, live) {
		t.Error("a new primary IP family needs a new Service")
	}
	live.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	if ServiceNeedsRecreate(desired, live) {
		t.Error("dropping the secondary IP family is an update")
	}
}
