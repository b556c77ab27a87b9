package clusters

import (
	"context"
	"strings"
	stdsync "sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

func TestParseMemberCompression(t *testing.T) {
	for _, tc := range []struct {
		annotations map[string]string
		want        string // "nil", "true" or "false"
		wantErr     bool
	}{
		{annotations: nil, want: "nil"},
		{annotations: map[string]string{AnnotationClusterName: "east"}, want: "nil"},
		{annotations: map[string]string{AnnotationMemberCompression: "true"}, want: "true"},
		{annotations: map[string]string{AnnotationMemberCompression: "false"}, want: "false"},
		{annotations: map[string]string{AnnotationMemberCompression: "True"}, want: "nil", wantErr: true},
		{annotations: map[string]string{AnnotationMemberCompression: ""}, want: "nil", wantErr: true},
		{annotations: map[string]string{AnnotationMemberCompression: "gzip"}, want: "nil", wantErr: true},
	} {
		got, err := ParseMemberCompression(tc.annotations)
		s := "nil"
		if got != nil {
			s = map[bool]string{true: "true", false: "false"}[*got]
		}
		if s != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%v: got %s, %v; want %s, error %v", tc.annotations, s, err, tc.want, tc.wantErr)
		}
		if err != nil && (!strings.Contains(err.Error(), AnnotationMemberCompression) || !strings.Contains(err.Error(), "--member-compression applies")) {
			t.Errorf("error %q does not name the annotation and what applies instead", err)
		}
	}
}

// TestRegistryMemberCompressionFollowsTheAnnotationOverTheFlag: a member's
// client config asks for gzip as its registration's annotation says,
// whatever --member-compression says; without the annotation, or with one
// that cannot be read (a warning Event says so), the flag decides. A
// changed annotation reconnects the member with the new setting.
func TestRegistryMemberCompressionFollowsTheAnnotationOverTheFlag(t *testing.T) {
	for _, daemonDisables := range []bool{false, true} {
		var mu stdsync.Mutex
		disabled := map[string]bool{} // by server host, the last config built
		kubeconfig := func(server string) string {
			return strings.Replace(tokenKubeconfig, "https://127.0.0.1:6443", server, 1)
		}
		secrets := map[string]string{"on": "true", "off": "false", "unset": "", "bad": "maybe"}
		var hubObjs []runtime.Object
		for name, value := range secrets {
			s := secret(name, "", kubeconfig("https://"+name+".test"), time.Hour)
			if name != "unset" {
				s.Annotations = map[string]string{AnnotationMemberCompression: value}
			}
			hubObjs = append(hubObjs, s)
		}
		r, hub, _, rec := startRegistryWith(t, Options{
			SyncTimeout:        5 * time.Second,
			DisableCompression: daemonDisables,
			NewClients: func(cfg *rest.Config) (Clients, error) {
				mu.Lock()
				disabled[strings.TrimPrefix(cfg.Host, "https://")] = cfg.DisableCompression
				mu.Unlock()
				return Clients{Kube: kubefake.NewClientset()}, nil
			},
		}, hubObjs...)
		for name := range secrets {
			waitUntil(t, func() bool { c := r.Get(name); return c != nil && c.HasSynced() })
		}
		want := map[string]bool{"on.test": false, "off.test": true, "unset.test": daemonDisables, "bad.test": daemonDisables}
		mu.Lock()
		for host, w := range want {
			if got, ok := disabled[host]; !ok || got != w {
				t.Errorf("daemon disables %v: %s built with DisableCompression %v (built: %v), want %v", daemonDisables, host, got, ok, w)
			}
		}
		mu.Unlock()
		got := strings.Join(events(rec), "\n")
		if !strings.Contains(got, `Warning `+ReasonInvalidConfig+` annotation `+AnnotationMemberCompression+`="maybe"`) {
			t.Errorf("no warning Event about the unreadable annotation in:\n%s", got)
		}

		// Turning gzip off for "on" reconnects it without gzip.
		s, err := hub.CoreV1().Secrets(ns).Get(context.Background(), "on", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Annotations[AnnotationMemberCompression] = "false"
		s.ResourceVersion = "2" // the fake hub does not set it
		if _, err := hub.CoreV1().Secrets(ns).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, func() bool { mu.Lock(); defer mu.Unlock(); return disabled["on.test"] })
	}
}
