package charts_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

// TestChartMetricsSecure: metrics.secure passes --metrics-secure, mounts
// the certificate Secret when one is named, probes over HTTPS, points the
// ServiceMonitor at HTTPS with the scraper's token, and binds the readers.
func TestChartMetricsSecure(t *testing.T) {
	off := daemonContainer(t, render(t))
	checkFlags(t, off.Args, map[string]string{"metrics-secure": "false", "metrics-cert-dir": ""})

	objs := render(t, "--set", "metrics.secure=true", "--set", "metrics.certSecret=ea-metrics-tls",
		"--set", "serviceMonitor.enabled=true",
		"--set-json", `metrics.readers=[{"name":"prometheus-k8s","namespace":"monitoring"}]`)
	c := daemonContainer(t, objs)
	checkFlags(t, c.Args, map[string]string{"metrics-secure": "true", "metrics-cert-dir": "/etc/endpoint-aggregator/metrics-tls"})
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s probe %+v: want HTTPS", name, p)
		}
	}
	if i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/etc/endpoint-aggregator/metrics-tls" }); i < 0 || !c.VolumeMounts[i].ReadOnly {
		t.Errorf("volume mounts %+v: want the certificate read-only", c.VolumeMounts)
	}
	vols := deployment(t, objs).Spec.Template.Spec.Volumes
	if i := slices.IndexFunc(vols, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "ea-metrics-tls" }); i < 0 {
		t.Errorf("volumes %+v: want Secret ea-metrics-tls", vols)
	}

	var sm struct {
		Spec struct {
			Endpoints []struct {
				Scheme          string         `json:"scheme"`
				BearerTokenFile string         `json:"bearerTokenFile"`
				TLSConfig       map[string]any `json:"tlsConfig"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	var crb rbacv1.ClusterRoleBinding
	for _, o := range objs {
		switch {
		case o.Kind == "ServiceMonitor":
			if err := yaml.Unmarshal(o.raw, &sm); err != nil {
				t.Fatal(err)
			}
		case o.Kind == "ClusterRoleBinding" && o.Name == fullname+"-metrics-reader":
			o.into(t, &crb)
		}
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Scheme != "https" ||
		sm.Spec.Endpoints[0].BearerTokenFile != "/var/run/secrets/kubernetes.io/serviceaccount/token" ||
		sm.Spec.Endpoints[0].TLSConfig["insecureSkipVerify"] != true {
		t.Errorf("ServiceMonitor endpoints %+v: want https with the token file", sm.Spec.Endpoints)
	}
	want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus-k8s", Namespace: "monitoring"}}
	if crb.RoleRef.Name != fullname+"-metrics-reader" || !slices.Equal(crb.Subjects, want) {
		t.Errorf("metrics reader binding %+v", crb)
	}

	// Without secure, neither certificate nor readers render.
	for _, o := range render(t, "--set", "metrics.certSecret=ea-metrics-tls", "--set-json", `metrics.readers=[{"name":"p","namespace":"m"}]`) {
		if strings.Contains(o.Name, "metrics-reader") || strings.Contains(string(o.raw), "ea-metrics-tls") {
			t.Errorf("%s %s rendered without metrics.secure", o.Kind, o.Name)
		}
	}
}

// TestChartNetworkPolicy: off by default; when enabled, ingress only to the
// metrics port from metricsFrom, and egress open unless egressTo is set.
func TestChartNetworkPolicy(t *testing.T) {
	find := func(objs []object) *networkingv1.NetworkPolicy {
		for _, o := range objs {
			if o.Kind == "NetworkPolicy" {
				var np networkingv1.NetworkPolicy
				o.into(t, &np)
				return &np
			}
		}
		return nil
	}
	if np := find(render(t)); np != nil {
		t.Fatalf("a NetworkPolicy renders by default: %+v", np)
	}

	np := find(render(t, "--set", "networkPolicy.enabled=true"))
	if np == nil {
		t.Fatal("networkPolicy.enabled renders no NetworkPolicy")
	}
	if np.Namespace != namespace || np.Spec.PodSelector.MatchLabels["app.kubernetes.io/instance"] != release {
		t.Errorf("NetworkPolicy %s/%s selects %v", np.Namespace, np.Name, np.Spec.PodSelector)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(np.Spec.Ingress) != 0 || len(np.Spec.Egress) != 0 {
		t.Errorf("without peers: policy types %v, ingress %+v, egress %+v; want ingress only, none allowed", np.Spec.PolicyTypes, np.Spec.Ingress, np.Spec.Egress)
	}

	np = find(render(t, "--set", "networkPolicy.enabled=true",
		"--set-json", `networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]`,
		"--set-json", `networkPolicy.egressTo=[{"ipBlock":{"cidr":"10.0.0.0/8"}},{"ipBlock":{"cidr":"192.0.2.10/32"}}]`,
		"--set-json", `networkPolicy.egressPorts=[{"port":6443,"protocol":"TCP"},{"port":443}]`))
	if np == nil {
		t.Fatal("no NetworkPolicy")
	}
	metrics := intstr.FromString("metrics")
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 || np.Spec.Ingress[0].From[0].NamespaceSelector == nil ||
		len(np.Spec.Ingress[0].Ports) != 1 || *np.Spec.Ingress[0].Ports[0].Port != metrics {
		t.Errorf("ingress %+v: want the metrics port from the monitoring namespace", np.Spec.Ingress)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || len(np.Spec.Egress) != 2 {
		t.Fatalf("policy types %v egress %+v: want DNS and the API servers", np.Spec.PolicyTypes, np.Spec.Egress)
	}
	if dns := np.Spec.Egress[0]; len(dns.To) != 0 || len(dns.Ports) != 2 || dns.Ports[0].Port.IntValue() != 53 {
		t.Errorf("first egress rule %+v: want DNS anywhere", dns)
	}
	if api := np.Spec.Egress[1]; len(api.To) != 2 || api.To[1].IPBlock == nil || api.To[1].IPBlock.CIDR != "192.0.2.10/32" ||
		len(api.Ports) != 2 || api.Ports[0].Port.IntValue() != 6443 {
		t.Errorf("second egress rule %+v: want the listed peers and ports", api)
	}

	if _, err := testenv.HelmTemplateErr(t, chartDir, release, namespace, "--set", "networkPolicy.enabled=true",
		"--set-json", `networkPolicy.egressPorts=[{"port":6443,"protocol":"HTTP"}]`); err == nil || !strings.Contains(err.Error(), "networkPolicy") {
		t.Errorf("a bad egress protocol: %v, want a schema error", err)
	}
}
