package clusters

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// aboutServer is an API server that answers /readyz and serves the About API
// in the given versions with the given properties (name → value).
type aboutServer struct {
	mu       sync.Mutex
	versions []string
	props    map[string]string
	// forbidden answers every About API request 403; reads counts them.
	forbidden bool
	reads     int
}

func (s *aboutServer) set(name, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.props[name] = value
}

func (s *aboutServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.URL.Path == "/readyz" {
		fmt.Fprint(w, "ok")
		return
	}
	if strings.HasPrefix(r.URL.Path, "/apis/about.k8s.io/") {
		s.reads++
	}
	if s.forbidden {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"no RBAC"}`)
		return
	}
	for _, v := range s.versions {
		if r.URL.Path != "/apis/about.k8s.io/"+v+"/clusterproperties" {
			continue
		}
		name := strings.TrimPrefix(r.URL.Query().Get("fieldSelector"), "metadata.name=")
		items := ""
		if value, ok := s.props[name]; ok {
			items = fmt.Sprintf(`{"apiVersion":"about.k8s.io/%s","kind":"ClusterProperty","metadata":{"name":%q},"spec":{"value":%q}}`, v, name, value)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"apiVersion":"about.k8s.io/%s","kind":"ClusterPropertyList","metadata":{},"items":[%s]}`, v, items)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"the server could not find the requested resource"}`)
}

func aboutClient(t *testing.T, s *aboutServer) kubernetes.Interface {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestReadIdentityReadsTheNewestServedVersion(t *testing.T) {
	for _, tc := range []struct {
		name     string
		versions []string
		props    map[string]string
		want     Identity
	}{
		{"API not served", nil, nil, Identity{}},
		{"served, no properties", []string{"v1beta1"}, map[string]string{}, Identity{Served: true}},
		{"v1beta1", []string{"v1beta1", "v1alpha1"}, map[string]string{PropertyClusterID: "east", PropertyClusterSet: "prod", "other.example.com": "x"},
			Identity{Served: true, ClusterID: "east", ClusterSet: "prod"}},
		{"v1alpha1 only", []string{"v1alpha1"}, map[string]string{PropertyClusterID: "east"}, Identity{Served: true, ClusterID: "east"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := aboutClient(t, &aboutServer{versions: tc.versions, props: tc.props})
			got, err := ReadIdentity(context.Background(), cs.Discovery().RESTClient())
			if err != nil || got != tc.want {
				t.Errorf("ReadIdentity = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestCheckIdentity(t *testing.T) {
	for _, tc := range []struct {
		name       string
		clusterSet string
		id         Identity
		refused    bool
	}{
		{"no About API", "prod", Identity{}, false},
		{"same id", "", Identity{Served: true, ClusterID: "east"}, false},
		{"no id", "prod", Identity{Served: true, ClusterSet: "prod"}, false},
		{"another cluster's id", "", Identity{Served: true, ClusterID: "west"}, true},
		{"another ClusterSet", "prod", Identity{Served: true, ClusterID: "east", ClusterSet: "staging"}, true},
		{"a ClusterSet, the hub names none", "", Identity{Served: true, ClusterSet: "staging"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkIdentity("east", tc.clusterSet, tc.id)
			if refused := err != nil; refused != tc.refused {
				t.Fatalf("checkIdentity = %v, want refused %v", err, tc.refused)
			}
			if err != nil && (!errors.Is(err, errIdentityMismatch) || Classify(err) != ClassIdentityMismatch) {
				t.Errorf("error %v is not an identity mismatch", err)
			}
		})
	}
	long := strings.Repeat("x", 10000)
	if err := checkIdentity("east", "", Identity{ClusterID: long}); err == nil || len(err.Error()) > 600 {
		t.Errorf("a long untrusted value is quoted whole: %d bytes", len(err.Error()))
	}
}

// A member that claims another cluster's id fails its probes as an identity
// mismatch, and its informers do not start, until it stops claiming it.
func TestProbeRefusesAMemberThatClaimsAnotherId(t *testing.T) {
	s := &aboutServer{versions: []string{"v1beta1"}, props: map[string]string{PropertyClusterID: "west"}}
	c := &Cluster{name: "east", clients: Clients{Kube: aboutClient(t, s)}, identity: newIdentityCheck()}
	err := c.probe(2 * time.Second)
	if Classify(err) != ClassIdentityMismatch {
		t.Fatalf("probe = %v, want an identity mismatch", err)
	}
	select {
	case <-c.identity.admitted():
		t.Fatal("the member's informers may start although it claims another id")
	default:
	}
	if got := c.Identity(); got.ClusterID != "west" {
		t.Errorf("Identity() = %+v", got)
	}

	s.set(PropertyClusterID, "east")
	if err := c.probe(2 * time.Second); err != nil {
		t.Fatalf("probe after the id was corrected = %v", err)
	}
	select {
	case <-c.identity.admitted():
	default:
		t.Fatal("the member's informers may not start after its id was corrected")
	}

	// Checked again only after identityRecheck while it passes.
	s.set(PropertyClusterID, "west")
	if err := c.probe(2 * time.Second); err != nil {
		t.Errorf("probe within identityRecheck of a passed check = %v", err)
	}
	c.identity.last = time.Now().Add(-identityRecheck)
	if err := c.probe(2 * time.Second); Classify(err) != ClassIdentityMismatch {
		t.Errorf("probe after identityRecheck = %v, want an identity mismatch", err)
	}
}

// The hub's ClusterSet is what members are checked against.
func TestProbeRefusesAMemberOfAnotherClusterSet(t *testing.T) {
	s := &aboutServer{versions: []string{"v1beta1", "v1alpha1"}, props: map[string]string{PropertyClusterSet: "staging"}}
	c := &Cluster{name: "east", clients: Clients{Kube: aboutClient(t, s)}, identity: newIdentityCheck(),
		clusterSet: func() string { return "prod" }}
	if err := c.probe(2 * time.Second); Classify(err) != ClassIdentityMismatch || !strings.Contains(err.Error(), `"staging"`) {
		t.Fatalf("probe = %v, want an identity mismatch naming the member's ClusterSet", err)
	}
}

// A member whose properties the daemon may not read (a registration made
// before the member rules allowed it) is judged by its registration, and
// not asked again on every probe.
func TestProbeReadsUnreadablePropertiesOncePerRecheck(t *testing.T) {
	s := &aboutServer{versions: []string{"v1beta1"}, forbidden: true}
	c := &Cluster{name: "east", clients: Clients{Kube: aboutClient(t, s)}, identity: newIdentityCheck()}
	for range 3 {
		if err := c.probe(2 * time.Second); err != nil {
			t.Fatalf("probe = %v, want the member judged by its registration", err)
		}
	}
	select {
	case <-c.identity.admitted():
	default:
		t.Fatal("the member's informers may not start")
	}
	s.mu.Lock()
	reads := s.reads
	s.mu.Unlock()
	if reads != 1 {
		t.Errorf("%d reads of the properties in three probes, want 1", reads)
	}
}
