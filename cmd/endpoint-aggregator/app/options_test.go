package app

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

func TestOptionsValidate(t *testing.T) {
	cases := []struct {
		name    string
		mutate  func(*Options)
		errText string
	}{
		{name: "defaults are valid", mutate: func(*Options) {}},
		{name: "bad export mode", mutate: func(o *Options) { o.ExportMode = "some" }, errText: "--export-mode"},
		{name: "bad per-cluster mode", mutate: func(o *Options) { o.PerClusterServices = "mirrored" }, errText: "--per-cluster-services"},
		{name: "no workers", mutate: func(o *Options) { o.Workers = 0 }, errText: "--workers"},
		{name: "bad namespace", mutate: func(o *Options) { o.Namespace = "Not_OK" }, errText: "--namespace"},
		{name: "zero QPS", mutate: func(o *Options) { o.MemberQPS = 0 }, errText: "QPS"},
		{name: "zero member lease QPS", mutate: func(o *Options) { o.MemberLeaseQPS = 0 }, errText: "--member-lease-qps"},
		{name: "zero member lease burst", mutate: func(o *Options) { o.MemberLeaseBurst = 0 }, errText: "--member-lease-burst"},
		{name: "member lease limits of their own", mutate: func(o *Options) { o.MemberLeaseQPS, o.MemberLeaseBurst = 0.5, 1 }},
		{name: "cluster profiles without access providers", mutate: func(o *Options) { o.ClusterProfileNamespaces = []string{"fleet"} }, errText: "--access-provider-file"},
		{name: "access providers without cluster profiles", mutate: func(o *Options) { o.AccessProviderFile = "/etc/ea/providers.json" }, errText: "--cluster-profile-namespaces"},
		{name: "bad denied CIDR", mutate: func(o *Options) { o.DeniedEndpointCIDRs = []string{"10.0.0.1/8"} }, errText: "--denied-endpoint-cidrs"},
		{name: "bad allowed CIDR", mutate: func(o *Options) { o.AllowedEndpointCIDRs = []string{"pods"} }, errText: "--allowed-endpoint-cidrs"},
		{name: "bad hub Service CIDR", mutate: func(o *Options) { o.HubServiceCIDRs = []string{"10.96.0.0"} }, errText: "--hub-service-cidrs"},
		{name: "good CIDRs", mutate: func(o *Options) {
			o.DeniedEndpointCIDRs, o.AllowedEndpointCIDRs, o.HubServiceCIDRs = []string{"192.168.0.0/16"}, []string{"10.0.0.0/8", "fd00::/8"}, []string{"10.96.0.0/12"}
		}},
		{name: "metrics cert dir without metrics-secure", mutate: func(o *Options) { o.MetricsCertDir = "/etc/ea/tls" }, errText: "--metrics-cert-dir needs --metrics-secure"},
		{name: "metrics-secure with a cert dir", mutate: func(o *Options) { o.MetricsSecure, o.MetricsCertDir = true, "/etc/ea/tls" }},
		{name: "metrics-secure with a self-signed certificate", mutate: func(o *Options) { o.MetricsSecure = true }},
		{name: "bad cluster profile namespace", mutate: func(o *Options) {
			o.ClusterProfileNamespaces, o.AccessProviderFile = []string{"Fleet"}, "/etc/ea/providers.json"
		}, errText: `--cluster-profile-namespaces "Fleet"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			tc.mutate(o)
			err := o.Validate()
			switch {
			case tc.errText == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.errText != "" && (err == nil || !strings.Contains(err.Error(), tc.errText)):
				t.Fatalf("error = %v, want one naming %s", err, tc.errText)
			}
		})
	}
}

func TestWarningLoggerLogsEachWarningOnce(t *testing.T) {
	w := newWarningLogger("hub", "")
	for i := 0; i < 3; i++ {
		w.HandleWarningHeader(299, "", "v1 Endpoints is deprecated")
	}
	n := 0
	w.seen.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Fatalf("remembered %d warnings, want 1", n)
	}
}

// TestMemberWarningsNameTheirCluster: a member client's warning is logged
// with the member's name, as every log line about a member is.
func TestMemberWarningsNameTheirCluster(t *testing.T) {
	var buf bytes.Buffer
	klog.LogToStderr(false)
	klog.SetOutput(&buf)
	t.Cleanup(func() { klog.SetOutput(io.Discard); klog.LogToStderr(true) })
	newWarningLogger("member", "east").HandleWarningHeader(299, "", "v1 Endpoints is deprecated")
	klog.Flush()
	if got := buf.String(); !strings.Contains(got, `cluster="east"`) || !strings.Contains(got, "v1 Endpoints is deprecated") {
		t.Fatalf("logged %q, want the warning with cluster=\"east\"", got)
	}
}
