package endpoints

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// zoned returns a ready endpoint at addr in zone ("" for none), with the
// member's own hints, which never reach the hub.
func zoned(addr, zone string, ready bool) discoveryv1.Endpoint {
	ep := endpoint(addr, ready)
	if zone != "" {
		ep.Zone = ptr.To(zone)
	}
	ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "member-zone"}}}
	return ep
}

// hintsOf lists "address zone1,zone2" for every endpoint of state, sorted;
// "-" for an endpoint without hints.
func hintsOf(state []*discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range state {
		for _, ep := range s.Endpoints {
			h := "-"
			if ep.Hints != nil {
				var zones []string
				for _, z := range ep.Hints.ForZones {
					zones = append(zones, z.Name)
				}
				h = strings.Join(zones, ",")
				if len(ep.Hints.ForNodes) > 0 {
					h += " nodes"
				}
			}
			out = append(out, ep.Addresses[0]+" "+h)
		}
	}
	slices.Sort(out)
	return out
}

// An import that prefers the same zone (or close) hints each endpoint for
// its own zone, not for the member's hints; one that does not hints none.
func TestHintsFollowTheImportsTrafficDistribution(t *testing.T) {
	src := testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts,
		zoned("10.0.0.1", "z1", true), zoned("10.0.0.2", "z2", true), zoned("10.0.0.3", "", false)))
	for _, tt := range []struct {
		td   string
		want []string
	}{
		{"", []string{"10.0.0.1 -", "10.0.0.2 -", "10.0.0.3 -"}},
		{corev1.ServiceTrafficDistributionPreferSameZone, []string{"10.0.0.1 z1", "10.0.0.2 z2", "10.0.0.3 -"}},
		{corev1.ServiceTrafficDistributionPreferClose, []string{"10.0.0.1 z1", "10.0.0.2 z2", "10.0.0.3 -"}},
		{corev1.ServiceTrafficDistributionPreferSameNode, []string{"10.0.0.1 -", "10.0.0.2 -", "10.0.0.3 -"}},
	} {
		t.Run(fmt.Sprintf("%q", tt.td), func(t *testing.T) {
			loc := Locality{TrafficDistribution: tt.td}
			state := apply(t, nil, PlanSlices(src, loc, nil))
			if got := hintsOf(state); !slices.Equal(got, tt.want) {
				t.Errorf("hints %q, want %q", got, tt.want)
			}
			if again := PlanSlices(src, loc, digests(state)); !again.Empty() {
				t.Errorf("in sync, yet planned %s", describe(again))
			}
			// The import changes its mind: every slice is rewritten.
			other := Locality{TrafficDistribution: corev1.ServiceTrafficDistributionPreferClose}
			if ZoneHinted(tt.td) {
				other = Locality{}
			}
			moved := apply(t, state, PlanSlices(src, other, digests(state)))
			if got := hintsOf(moved); slices.Equal(got, tt.want) {
				t.Errorf("hints kept as %q after the import went from %q to %q", got, tt.td, other.TrafficDistribution)
			}
		})
	}
}

// A ready endpoint without a zone, here or in a peer, leaves every endpoint
// unhinted, and HintsFor says why; one that is not ready, or a duplicate
// that loses to a zoned ready endpoint, does not. An empty zone is none.
func TestAReadyEndpointWithoutAZoneHintsNone(t *testing.T) {
	prefer := Locality{TrafficDistribution: corev1.ServiceTrafficDistributionPreferSameZone}
	for _, tt := range []struct {
		name   string
		src    Source
		loc    Locality
		hinted bool
		why    string
	}{
		{"all zoned", testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts,
			zoned("10.0.0.1", "z1", true), zoned("10.0.0.2", "z2", true))), prefer, true, ""},
		{"one ready without a zone", testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts,
			zoned("10.0.0.1", "z1", true), zoned("10.0.0.2", "", true))), prefer, false, "cluster east has a ready endpoint without a zone"},
		{"an empty zone", testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts,
			zoned("10.0.0.1", "z1", true), func() discoveryv1.Endpoint {
				ep := zoned("10.0.0.2", "", true)
				ep.Zone = ptr.To("")
				return ep
			}())), prefer, false, "cluster east has a ready endpoint without a zone"},
		{"one not ready without a zone", testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts,
			zoned("10.0.0.1", "z1", true), zoned("10.0.0.2", "", false))), prefer, true, ""},
		{"a duplicate without a zone loses", testSource(
			memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, zoned("10.0.0.1", "z1", true)),
			memberSlice("web-b", discoveryv1.AddressTypeIPv4, httpPorts, zoned("10.0.0.1", "", false))), prefer, true, ""},
		{"a peer without a zone", testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts,
			zoned("10.0.0.1", "z1", true))), Locality{TrafficDistribution: prefer.TrafficDistribution, PeersUnzoned: "west"}, false,
			"cluster west has a ready endpoint without a zone"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hints, why := HintsFor(tt.src, tt.loc)
			if hints.OwnZone != tt.hinted || why != tt.why {
				t.Errorf("HintsFor = %+v, %q; want hinted %v, %q", hints, why, tt.hinted, tt.why)
			}
			state := apply(t, nil, PlanSlices(tt.src, tt.loc, nil))
			for _, h := range hintsOf(state) {
				if strings.HasSuffix(h, " -") == tt.hinted && strings.HasPrefix(h, "10.0.0.1 ") {
					t.Errorf("hub endpoint %q, want hinted %v", h, tt.hinted)
				}
			}
			var unzoned bool
			for _, d := range digests(state) {
				unzoned = unzoned || d.Unzoned
			}
			if want := strings.HasPrefix(tt.why, "cluster east"); unzoned != want {
				t.Errorf("digests say unzoned %v, want %v", unzoned, want)
			}
		})
	}
}

// Hints stay within what the API accepts: one zone per endpoint, never a
// node hint, whatever the member hinted.
func TestHubHintsStayWithinTheAPIsLimits(t *testing.T) {
	ep := zoned("10.0.0.1", "z1", true)
	ep.Hints = &discoveryv1.EndpointHints{ForNodes: []discoveryv1.ForNode{{Name: "n1"}}}
	for i := range 9 {
		ep.Hints.ForZones = append(ep.Hints.ForZones, discoveryv1.ForZone{Name: fmt.Sprintf("z%d", i)})
	}
	src := testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, ep))
	state := apply(t, nil, PlanSlices(src, Locality{TrafficDistribution: corev1.ServiceTrafficDistributionPreferClose}, nil))
	if got, want := hintsOf(state), []string{"10.0.0.1 z1"}; !slices.Equal(got, want) {
		t.Errorf("hints %q, want %q", got, want)
	}
}

// "This cluster first": the hub cluster's endpoints are hinted for every
// zone of the hub's Nodes, every other cluster's for a zone no Node has, so
// a hub node uses the hub cluster's ready endpoints while there is one. It
// takes precedence over zone hints, and needs the hub to be a member with
// zoned Nodes, at most 8 zones.
func TestPreferLocalHintsTheHubClustersEndpointsForEveryHubZone(t *testing.T) {
	src := func(cluster string) Source {
		s := testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts,
			zoned("10.0.0.1", "z1", true), zoned("10.0.0.2", "", false)))
		s.Cluster = cluster
		return s
	}
	local := Locality{PreferLocal: true, HubCluster: "hub", HubZones: []string{"a", "b"},
		TrafficDistribution: corev1.ServiceTrafficDistributionPreferSameZone, PeersUnzoned: "west"}
	nine := make([]string, 9)
	for i := range nine {
		nine[i] = fmt.Sprintf("z%d", i)
	}
	for _, tt := range []struct {
		name    string
		cluster string
		loc     Locality
		want    []string
		why     string
	}{
		{"the hub's endpoints", "hub", local, []string{"10.0.0.1 a,b", "10.0.0.2 a,b"}, ""},
		{"another cluster's", "east", local, []string{"10.0.0.1 " + RemoteZone, "10.0.0.2 " + RemoteZone}, ""},
		{"the hub is no member", "east", Locality{PreferLocal: true, HubZones: []string{"a"}}, []string{"10.0.0.1 -", "10.0.0.2 -"},
			"the hub is not a member (--hub-is-member)"},
		{"the hub is no member, zone preference still holds", "east", Locality{PreferLocal: true, TrafficDistribution: corev1.ServiceTrafficDistributionPreferClose},
			[]string{"10.0.0.1 z1", "10.0.0.2 -"}, ""},
		{"no zoned hub Node", "hub", Locality{PreferLocal: true, HubCluster: "hub"}, []string{"10.0.0.1 -", "10.0.0.2 -"},
			"no Node of the hub has a zone label"},
		{"too many zones", "hub", Locality{PreferLocal: true, HubCluster: "hub", HubZones: nine}, []string{"10.0.0.1 -", "10.0.0.2 -"},
			"the hub's Nodes are in 9 zones, more than the 8 a hint can name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := src(tt.cluster)
			if _, why := HintsFor(s, tt.loc); why != tt.why {
				t.Errorf("HintsFor says %q, want %q", why, tt.why)
			}
			state := apply(t, nil, PlanSlices(s, tt.loc, nil))
			if got := hintsOf(state); !slices.Equal(got, tt.want) {
				t.Errorf("hints %q, want %q", got, tt.want)
			}
			if again := PlanSlices(s, tt.loc, digests(state)); !again.Empty() {
				t.Errorf("in sync, yet planned %s", describe(again))
			}
		})
	}
	// The hub's zones change: its slices are rewritten.
	s := src("hub")
	state := apply(t, nil, PlanSlices(s, local, nil))
	more := local
	more.HubZones = []string{"a", "b", "c"}
	if plan := PlanSlices(s, more, digests(state)); len(plan.Update) != 1 {
		t.Errorf("a new hub zone planned %s, want the slice updated", describe(plan))
	}
}

// The prefer-local annotation is exported: the oldest export's value goes
// on the import, a difference is a PreferLocalConflict, and a value that is
// neither true nor false is dropped with a problem.
func TestPreferLocalFollowsTheOldestExport(t *testing.T) {
	exp := func(cluster string, age time.Duration, value string) Export {
		svc := testSvc(svcPort("http", 80))
		if value != "" {
			svc.Annotations = map[string]string{AnnotationPreferLocal: value}
		}
		e := Export{Cluster: cluster, Service: svc, Created: metav1.NewTime(time.Unix(1000, 0).Add(-age))}
		// Through the record, as the merge reads it.
		parsed, err := ParseExportRecord(cluster, testNamespace, testService, ExportRecord(e))
		if err != nil {
			t.Fatal(err)
		}
		return parsed
	}
	res := MergeImport(testNamespace, testService, []Export{exp("east", time.Hour, "true"), exp("west", time.Minute, "")})
	if got := res.Import.Annotations[AnnotationPreferLocal]; got != "true" {
		t.Errorf("import prefer-local %q, want the oldest export's true", got)
	}
	if len(res.Conflicts) != 1 || res.Conflicts[0].Reason != PreferLocalConflict {
		t.Errorf("conflicts %+v, want one PreferLocalConflict", res.Conflicts)
	}
	if l := LocalityOf(res.Import); !l.PrefersLocal(false) {
		t.Errorf("LocalityOf %+v does not prefer local", l)
	}
	res = MergeImport(testNamespace, testService, []Export{exp("east", time.Hour, ""), exp("west", time.Minute, "")})
	if _, ok := res.Import.Annotations[AnnotationPreferLocal]; ok || len(res.Conflicts) != 0 {
		t.Errorf("exports without the annotation: import annotations %v, conflicts %+v", res.Import.Annotations, res.Conflicts)
	}
	if l := LocalityOf(res.Import); !l.PrefersLocal(true) || l.PrefersLocal(false) {
		t.Errorf("without the annotation the daemon's default decides: %+v", l)
	}

	svc := testSvc(svcPort("http", 80))
	svc.Annotations = map[string]string{AnnotationPreferLocal: "yes"}
	out, problems := SanitizeService(svc)
	if _, ok := out.Annotations[AnnotationPreferLocal]; ok || len(problems) != 1 || !strings.Contains(problems[0], AnnotationPreferLocal) {
		t.Errorf("SanitizeService kept %v, problems %q", out.Annotations, problems)
	}
}
