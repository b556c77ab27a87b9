package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// sampleHub is a hub state shaped like the daemon's output for the demo's
// fixtures.
func sampleHub() hubState {
	var st hubState
	for _, svc := range []string{"cart", "db"} {
		si := mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Name: svc, Namespace: appNamespace}}
		si.Spec.Type = mcsv1beta1.ClusterSetIP
		si.Spec.IPs = []string{"10.0.0.50"}
		si.Spec.Ports = []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}, {Name: "grpc", Protocol: corev1.ProtocolTCP, Port: 9090}}
		si.Status.Clusters = []mcsv1beta1.ClusterStatus{{Cluster: "west"}, {Cluster: "east"}}
		if svc == "db" {
			si.Spec.Type = mcsv1beta1.Headless
			si.Spec.IPs = nil
			si.Spec.Ports = []mcsv1beta1.ServicePort{{Name: "postgres", Port: 5432}}
			si.Status.Clusters = si.Status.Clusters[1:]
		}
		st.imports = append(st.imports, si)
	}
	for _, m := range members {
		st.services = append(st.services, corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "cart-" + m.name, Labels: map[string]string{sourceLabel: m.name}},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.7", Ports: cartService().Spec.Ports},
		})
		for _, svc := range []string{"cart", "db"} {
			eps := m.cart
			if svc == "db" {
				eps = m.db
			}
			if len(eps) == 0 {
				continue
			}
			sl := endpointSlice(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svc}}, eps)
			sl.Name = svc + "-" + m.name + "-x1"
			sl.Labels = map[string]string{mcsServiceLabel: svc, mcsClusterLabel: m.name}
			st.slices = append(st.slices, *sl)
		}
		st.endpoints = append(st.endpoints, corev1.Endpoints{
			ObjectMeta: metav1.ObjectMeta{Name: "cart-" + m.name},
			Subsets: []corev1.EndpointSubset{{
				Addresses:         []corev1.EndpointAddress{{IP: m.cart[0].ip}, {IP: m.cart[1].ip}},
				NotReadyAddresses: []corev1.EndpointAddress{{IP: m.cart[len(m.cart)-1].ip}},
				Ports:             []corev1.EndpointPort{{Name: "http", Port: 8080}},
			}},
		})
	}
	st.services = append(st.services, corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "derived-abc123"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.50", Ports: cartService().Spec.Ports},
	})
	return st
}

func TestPrintHub(t *testing.T) {
	var buf bytes.Buffer
	if err := printHub(&buf, sampleHub()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	t.Log("\n" + out)
	for _, want := range []string{
		`ServiceImports \(2\)`,
		`(?m)^cart\s+ClusterSetIP\s+http:80/TCP,grpc:9090/TCP\s+10\.0\.0\.50\s+east,west$`,
		`(?m)^db\s+Headless\s+postgres:5432/TCP\s+-\s+east$`,
		`(?m)^cart-east\s+ClusterIP\s+10\.0\.0\.7\s+http:80/TCP,grpc:9090/TCP\s+east$`,
		`(?m)^derived-abc123\s+ClusterIP\s+10\.0\.0\.50\s+\S+\s+-$`,
		`(?m)^cart-east-x1\s+cart\s+east\s+IPv4\s+3/4\s+10\.1\.0\.10,`,
		`(?m)^cart-west-x1\s+cart\s+west\s+IPv4\s+2/3\s`,
		`(?m)^db-east-x1\s+db\s+east\s+IPv4\s+2/2\s`,
		`(?m)^cart-west\s+2 \(10\.2\.0\.10,10\.2\.0\.11\)\s+1 \(10\.2\.0\.12\)\s+http:8080/TCP$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("output does not match %s", want)
		}
	}
}

func TestMissingObjects(t *testing.T) {
	st := sampleHub()
	if m := missingObjects(st); len(m) != 0 {
		t.Fatalf("complete state reported missing %v", m)
	}
	st.slices = st.slices[1:] // drop cart from east
	st.imports[1].Status.Clusters = nil
	got := strings.Join(missingObjects(st), "; ")
	for _, want := range []string{"EndpointSlice cart from east", "ServiceImport db status cluster east"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing = %q, want it to mention %q", got, want)
		}
	}
	if got := missingObjects(hubState{}); len(got) != 5 {
		t.Errorf("empty hub: %d missing, want 5: %v", len(got), got)
	}
}

func TestFixtures(t *testing.T) {
	s := endpointSlice(cartService(), members[0].cart)
	if s.Labels[discoveryv1.LabelServiceName] != "cart" || len(s.Ports) != 2 || *s.Ports[0].Port != 8080 {
		t.Errorf("unexpected slice %+v", s)
	}
	ready := 0
	for _, e := range s.Endpoints {
		if *e.Conditions.Ready {
			ready++
		}
		if e.Zone == nil || e.NodeName == nil || e.Hostname == nil {
			t.Errorf("endpoint %v lacks zone/node/hostname", e.Addresses)
		}
	}
	if ready != 3 || len(s.Endpoints) != 4 {
		t.Errorf("east cart: %d/%d ready, want 3/4", ready, len(s.Endpoints))
	}
	sec := registrationSecret("west", []byte("kc"))
	if sec.Labels[memberLabel] != "true" || sec.Annotations[clusterNameAnno] != "west" || string(sec.Data["kubeconfig"]) != "kc" {
		t.Errorf("unexpected Secret %+v", sec)
	}
}
