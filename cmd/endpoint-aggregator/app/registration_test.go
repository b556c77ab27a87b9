package app

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
)

var testCAData = []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")

func TestBuildMemberKubeconfig(t *testing.T) {
	ep := memberEndpoint{Server: "https://east.example:6443", CAData: testCAData, TLSServerName: "kubernetes"}
	data, err := buildMemberKubeconfig("east", "endpoint-aggregator-member", ep, "tok")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := buildMemberKubeconfig("east", "endpoint-aggregator-member", ep, "tok")
	if !bytes.Equal(data, again) {
		t.Error("the kubeconfig is not deterministic")
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	ctx := kc.Contexts[kc.CurrentContext]
	if kc.CurrentContext != "east" || ctx == nil || len(kc.Clusters) != 1 || len(kc.AuthInfos) != 1 {
		t.Fatalf("kubeconfig %+v", kc)
	}
	c, u := kc.Clusters[ctx.Cluster], kc.AuthInfos[ctx.AuthInfo]
	if c.Server != ep.Server || !bytes.Equal(c.CertificateAuthorityData, testCAData) || c.TLSServerName != "kubernetes" || c.CertificateAuthority != "" {
		t.Errorf("cluster %+v", c)
	}
	if u.Token != "tok" || ctx.AuthInfo != "endpoint-aggregator-member" {
		t.Errorf("user %q %+v", ctx.AuthInfo, u)
	}
	// What the daemon accepts with its default (strict) policy.
	cfg, err := clusters.RESTConfig(data, clusters.KubeconfigPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != ep.Server || cfg.BearerToken != "tok" {
		t.Errorf("daemon config host %q token %q", cfg.Host, cfg.BearerToken)
	}
	if kubeconfigToken(data) != "tok" {
		t.Errorf("kubeconfigToken = %q", kubeconfigToken(data))
	}
	if kubeconfigToken([]byte("not: [a kubeconfig")) != "" {
		t.Error("kubeconfigToken of garbage")
	}

	if _, err := buildMemberKubeconfig("east", "u", ep, ""); err == nil {
		t.Error("no error without a token")
	}
}

func TestEndpointFromConfig(t *testing.T) {
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, testCAData, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		cfg      rest.Config
		override string
		want     memberEndpoint
		wantErr  string
	}{
		{
			name: "inline CA",
			cfg:  rest.Config{Host: "https://10.0.0.1:6443/", TLSClientConfig: rest.TLSClientConfig{CAData: testCAData, ServerName: "api"}},
			want: memberEndpoint{Server: "https://10.0.0.1:6443", CAData: testCAData, TLSServerName: "api"},
		},
		{
			name: "CA file is inlined",
			cfg:  rest.Config{Host: "https://10.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}},
			want: memberEndpoint{Server: "https://10.0.0.1:6443", CAData: testCAData},
		},
		{
			name:     "--member-server overrides the context",
			cfg:      rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAData: testCAData}},
			override: "https://east.internal:443",
			want:     memberEndpoint{Server: "https://east.internal:443", CAData: testCAData},
		},
		{
			name: "no CA",
			cfg:  rest.Config{Host: "https://10.0.0.1:6443"},
			want: memberEndpoint{Server: "https://10.0.0.1:6443"},
		},
		{
			name:    "missing CA file",
			cfg:     rest.Config{Host: "https://10.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAFile: caFile + ".missing"}},
			wantErr: "certificate-authority",
		},
		{
			name:     "bad server",
			cfg:      rest.Config{Host: "https://10.0.0.1:6443"},
			override: "east:6443",
			wantErr:  "not an http(s)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := endpointFromConfig(&tc.cfg, tc.override)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Server != tc.want.Server || !bytes.Equal(got.CAData, tc.want.CAData) || got.TLSServerName != tc.want.TLSServerName {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRegistrationSecret(t *testing.T) {
	s := registrationSecret("endpoint-aggregator", "east", []byte("kc"), "")
	if s.Labels[clusters.LabelMemberCluster] != "true" || clusters.ClusterName(s) != "east" || string(s.Data[clusters.KubeconfigKey]) != "kc" || s.Type != corev1.SecretTypeOpaque {
		t.Errorf("secret %+v", s)
	}

	live := s.DeepCopy()
	live.Labels["team"] = "a"
	live.Annotations["note"] = "b"
	live.Data["extra"] = []byte("c")
	if !registrationUpToDate(live, s) {
		t.Error("foreign labels, annotations or keys make the Secret out of date")
	}
	changed := live.DeepCopy()
	changed.Data[clusters.KubeconfigKey] = []byte("other")
	if registrationUpToDate(changed, s) {
		t.Error("another kubeconfig is up to date")
	}
	changed = live.DeepCopy()
	changed.Annotations[clusters.AnnotationClusterName] = "west"
	if registrationUpToDate(changed, s) {
		t.Error("another cluster name is up to date")
	}

	if _, ok := s.Annotations[clusters.AnnotationKubeSystemUID]; ok {
		t.Error("a Secret without a known kube-system UID records one")
	}
	withUID := registrationSecret("endpoint-aggregator", "east", []byte("kc"), "uid-east")
	if withUID.Annotations[clusters.AnnotationKubeSystemUID] != "uid-east" {
		t.Errorf("annotations %v, want the kube-system UID recorded", withUID.Annotations)
	}
	if registrationUpToDate(live, withUID) {
		t.Error("a Secret without the kube-system UID is up to date")
	}
	if !registrationUpToDate(withUID, s) {
		t.Error("a recorded kube-system UID makes the Secret out of date for a run that could not read one")
	}

	// --member-compression annotates the Secret; without it the Secret
	// carries no such annotation, and a live one is kept.
	if _, ok := s.Annotations[clusters.AnnotationMemberCompression]; ok {
		t.Error("a Secret registered without --member-compression carries the annotation")
	}
	off := (&registerOptions{Compression: "false"}).registrationSecret("endpoint-aggregator", "east", []byte("kc"), "")
	if off.Annotations[clusters.AnnotationMemberCompression] != "false" {
		t.Errorf("annotations %v, want %s=false", off.Annotations, clusters.AnnotationMemberCompression)
	}
	if registrationUpToDate(live, off) {
		t.Error("a Secret without the compression annotation is up to date for --member-compression=false")
	}
	if !registrationUpToDate(off, (&registerOptions{}).registrationSecret("endpoint-aggregator", "east", []byte("kc"), "")) {
		t.Error("a run without --member-compression finds a Secret with the annotation out of date")
	}

	data, err := secretYAML(s)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "creationTimestamp") || !strings.Contains(string(data), "stringData:") {
		t.Errorf("YAML:\n%s", data)
	}
	var back corev1.Secret
	if err := yaml.UnmarshalStrict(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Name != "east" || back.Namespace != "endpoint-aggregator" || back.StringData[clusters.KubeconfigKey] != "kc" || len(back.Data) != 0 || back.Kind != "Secret" {
		t.Errorf("YAML round trip: %+v", back)
	}
}

func testJWT(claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(claims)) + ".c2ln"
}

func TestTokenDueForRenewal(t *testing.T) {
	issued := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	year := testJWT(fmt.Sprintf(`{"iat":%d,"exp":%d,"sub":"x"}`, issued.Unix(), issued.Add(365*24*time.Hour).Unix()))
	for _, tc := range []struct {
		name  string
		now   time.Time
		token string
		want  bool
	}{
		{"fresh", issued.Add(time.Hour), year, false},
		{"two thirds left", issued.Add(240 * 24 * time.Hour), year, false},
		{"less than a third left", issued.Add(250 * 24 * time.Hour), year, true},
		{"expired", issued.Add(400 * 24 * time.Hour), year, true},
		{"legacy token without exp", issued, testJWT(`{"sub":"x"}`), false},
		{"not a JWT", issued, "opaque-token", false},
		{"no iat, not expired", issued, testJWT(fmt.Sprintf(`{"exp":%d}`, issued.Add(time.Hour).Unix())), false},
		{"no iat, expired", issued.Add(2 * time.Hour), testJWT(fmt.Sprintf(`{"exp":%d}`, issued.Add(time.Hour).Unix())), true},
	} {
		if got := tokenDueForRenewal(tc.now, tc.token); got != tc.want {
			t.Errorf("%s: due = %v, want %v", tc.name, got, tc.want)
		}
	}
	if _, exp, ok := jwtLifetime(year); !ok || !exp.Equal(issued.Add(365*24*time.Hour)) {
		t.Errorf("jwtLifetime: %v %v", exp, ok)
	}
}

// TestServerConflict: one API server under two names, or a name moved to
// another API server, is refused unless asked for.
func TestServerConflict(t *testing.T) {
	reg := func(name, server, ca, uid string) corev1.Secret {
		kc, err := buildMemberKubeconfig(name, "sa", memberEndpoint{Server: server, CAData: []byte(ca)}, "token")
		if err != nil {
			t.Fatal(err)
		}
		return *registrationSecret("ns", name, kc, uid)
	}
	// east recorded no kube-system UID (registered by an older register),
	// west did.
	east := reg("east", "https://10.0.0.1:6443", "ca-east", "")
	west := reg("west", "https://10.0.0.2:6443", "ca-west", "uid-west")
	all := []corev1.Secret{east, west}
	for _, tc := range []struct {
		name, server, ca, uid string
		existing              *corev1.Secret
		force, allowDup       bool
		want                  string // "" for no error
	}{
		{"east", "https://10.0.0.1:6443", "ca-east", "", &east, false, false, ""},
		{"east", "https://10.0.0.1:6443/", "", "", &east, false, false, ""},
		{"north", "https://10.0.0.3:6443", "ca-north", "", nil, false, false, ""},
		{"east2", "https://10.0.0.1:6443", "ca-east", "", nil, false, false, `already registered as member "east"`},
		{"east2", "HTTPS://10.0.0.1:6443", "", "", nil, false, false, `already registered as member "east"`},
		{"east2", "https://10.0.0.1:6443", "ca-east", "", nil, false, true, ""},
		{"east2", "https://10.0.0.1:6443", "ca-other", "", nil, false, false, ""}, // same URL, another cluster
		{"east", "https://10.0.0.2:6443", "ca-west", "", &east, false, false, "pass --force to re-point it"},
		{"east", "https://10.0.0.9:6443", "ca-9", "", &east, true, false, ""},
		{"east", "https://10.0.0.2:6443", "ca-west", "", &east, true, false, `already registered as member "west"`},

		// By kube-system UID: west through another URL or CA bundle.
		{"west2", "https://lb.example:6443", "ca-west", "uid-west", nil, false, false, `already registered as member "west" (secret ns/west, server https://10.0.0.2:6443): both have kube-system UID uid-west`},
		{"west2", "https://10.0.0.2:6443", "ca-west+other", "uid-west", nil, false, false, `both have kube-system UID uid-west`},
		{"west2", "https://lb.example:6443", "ca-west", "uid-west", nil, false, true, ""},
		{"west2", "https://lb.example:6443", "ca-west", "uid-other", nil, false, false, ""},
		// A registration without a UID falls back to URL and CA.
		{"east2", "https://lb.example:6443", "ca-east", "uid-east", nil, false, false, ""},
		{"east2", "https://10.0.0.1:6443", "ca-east", "uid-east", nil, false, false, `already registered as member "east"`},
		// The same URL and CA is one server, whatever UID was recorded.
		{"west2", "https://10.0.0.2:6443", "ca-west", "uid-rebuilt", nil, false, false, `already registered as member "west"`},
		// The UID unknown now (no permission to read kube-system): URL and CA.
		{"west2", "https://lb.example:6443", "ca-west", "", nil, false, false, ""},
		// Re-pointing: another URL for the same cluster is none; the same
		// URL for another cluster is one.
		{"west", "https://lb.example:6443", "ca-west", "uid-west", &west, false, false, ""},
		{"west", "https://10.0.0.2:6443", "ca-west", "uid-rebuilt", &west, false, false, "is registered for another cluster (kube-system UID uid-west"},
		{"west", "https://10.0.0.2:6443", "ca-west", "uid-rebuilt", &west, true, false, ""},
		{"west", "https://lb.example:6443", "ca-west", "", &west, false, false, "pass --force to re-point it"},
	} {
		err := serverConflict(tc.name, memberEndpoint{Server: tc.server, CAData: []byte(tc.ca)}, tc.uid, tc.existing, all, tc.force, tc.allowDup)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s at %s, UID %q (force %t, allow-duplicate %t): %v, want no error", tc.name, tc.server, tc.uid, tc.force, tc.allowDup, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s at %s, UID %q (force %t, allow-duplicate %t): %v, want an error with %q", tc.name, tc.server, tc.uid, tc.force, tc.allowDup, err, tc.want)
		}
	}
}
