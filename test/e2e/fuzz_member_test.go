package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	stdsync "sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

var (
	fuzzSeed   = flag.Uint64("fuzz-seed", 1, "seed of TestFuzzingMember's rewrites: the same seed replays the same values round by round")
	fuzzRounds = flag.Int("fuzz-rounds", 25, "rounds of TestFuzzingMember; each rewrites east's Services, EndpointSlices and ServiceExports anew")
)

// fuzzServices are the services both members export; west's port of each.
var fuzzServices = []string{"web", "api"}

// memberFuzzer rewrites what a member's API server returns with values at
// and just past the API's limits. The values depend only on the seed, the
// round and the object, not on how often or in what order the object is
// read: a failing seed replays.
type memberFuzzer struct {
	seed uint64

	mu        stdsync.Mutex
	round     int
	seen      map[string]bool // kind/namespace/name rewritten in this round
	tried     map[string]int  // mutation → objects it was applied to
	rewritten int             // objects rewritten, over all rounds
}

func (f *memberFuzzer) next(round int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.round, f.seen = round, map[string]bool{}
}

// delivered is how many objects of this round the member has returned.
func (f *memberFuzzer) delivered() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.seen)
}

// rewrite is a liarRewrite.
func (f *memberFuzzer) rewrite(kind string, obj map[string]any) bool {
	md, _ := obj["metadata"].(map[string]any)
	if md == nil || md["namespace"] != appNamespace {
		return false
	}
	id := kind + "/" + fmt.Sprint(md["namespace"]) + "/" + fmt.Sprint(md["name"])
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	f.mu.Lock()
	round := f.round
	f.mu.Unlock()
	rng := rand.New(rand.NewPCG(f.seed, uint64(round)<<32^h.Sum64()))
	var muts []fuzzMutation
	switch kind {
	case "EndpointSlice":
		muts = sliceMutations
	case "Service":
		muts = serviceMutations
	case "ServiceExport":
		muts = exportMutations
	}
	var applied []string
	for range 1 + rng.IntN(3) {
		m := muts[rng.IntN(len(muts))]
		m.apply(rng, obj)
		applied = append(applied, m.name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen[id] = true
	f.rewritten++
	for _, a := range applied {
		f.tried[a]++
	}
	return true
}

// fuzzMutation changes one part of a decoded object.
type fuzzMutation struct {
	name  string
	apply func(rng *rand.Rand, obj map[string]any)
}

// Values at and just past the API's limits.
const (
	maxAnnotations = 256 << 10 // total size of an object's annotations
	fuzzAlphabet   = "abcdefghijklmnopqrstuvwxyz0123456789"
)

func fuzzWord(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = fuzzAlphabet[rng.IntN(len(fuzzAlphabet))]
	}
	return string(b)
}

// fuzzText is a string of n bytes: plain, unicode, markup that JSON
// escapes, or control characters.
func fuzzText(rng *rand.Rand, n int) string {
	unit := []string{"a", "é", "<&>", "\u0000", "💥", " "}[rng.IntN(6)]
	return strings.Repeat(unit, max(1, n/len(unit)))
}

// fuzzMap is a map of labels or annotations: empty, one huge value, many
// small keys, keys past the name limits, or reserved prefixes.
func fuzzMap(rng *rand.Rand) map[string]any {
	out := map[string]any{}
	switch rng.IntN(6) {
	case 0: // empty
	case 1: // one value at or just past the whole size limit
		out["big"] = fuzzText(rng, maxAnnotations-3+rng.IntN(3)*8)
	case 2: // many small keys adding up past the limit
		for i := range 4000 {
			out[fmt.Sprintf("k%04d", i)] = fuzzWord(rng, 64)
		}
	case 3: // a name of 63 and 64 bytes, a prefix of 253 and 254
		out[fuzzWord(rng, 63)] = fuzzWord(rng, 63)
		out[fuzzWord(rng, 64)] = fuzzWord(rng, 64)
		out[fuzzWord(rng, 253)+"/x"] = "v"
		out[fuzzWord(rng, 254)+"/x"] = "v"
	case 4: // keys that are not label keys at all
		out[""] = "empty key"
		out["a b"] = "space"
		out["é"] = "unicode"
		out["-x-"] = "edge"
	case 5: // the labels and annotations the daemon writes itself
		out["multicluster.kubernetes.io/service-name"] = "other"
		out["multicluster.kubernetes.io/source-cluster"] = "west"
		out["endpoint-aggregator.io/exported-annotations"] = "{}"
		out["endpointslice.kubernetes.io/managed-by"] = "endpoint-aggregator.io"
	}
	return out
}

func setMeta(obj map[string]any, field string, m map[string]any) {
	md, _ := obj["metadata"].(map[string]any)
	md[field] = m
}

func eachEndpoint(obj map[string]any, f func(i int, ep map[string]any)) {
	eps, _ := obj["endpoints"].([]any)
	for i, e := range eps {
		if ep, ok := e.(map[string]any); ok {
			f(i, ep)
		}
	}
}

// fuzzPorts is a list of ports: too many, out of range, duplicated or
// badly named.
func fuzzPorts(rng *rand.Rand, service bool) []any {
	port := func(name string, n int, proto string) map[string]any {
		p := map[string]any{"name": name, "port": n, "protocol": proto}
		if service {
			p["targetPort"] = n
		}
		return p
	}
	switch rng.IntN(6) {
	case 0: // the limit, and one past it
		n := 100 + rng.IntN(2)
		out := make([]any, n)
		for i := range out {
			out[i] = port(fmt.Sprintf("p%d", i), 1000+i, "TCP")
		}
		return out
	case 1:
		return []any{port("zero", 0, "TCP"), port("high", 65536, "TCP"), port("neg", -1, "UDP")}
	case 2:
		return []any{port("http", 80, "TCP"), port("http", 81, "TCP"), port("other", 80, "TCP")}
	case 3:
		return []any{port(fuzzWord(rng, 15), 80, "TCP"), port(fuzzWord(rng, 16), 81, "TCP"), port("UPPER", 82, "TCP"), port("é", 83, "TCP")}
	case 4:
		return []any{port("quic", 443, "HTTP3"), port("", 444, "")}
	default:
		return []any{}
	}
}

// fuzzHints gives every endpoint 8 hints of field (the API's limit) or 9,
// the last one perhaps naming the first again.
func fuzzHints(field, prefix string) func(rng *rand.Rand, obj map[string]any) {
	return func(rng *rand.Rand, obj map[string]any) {
		eachEndpoint(obj, func(i int, ep map[string]any) {
			hints := make([]any, 8+rng.IntN(2))
			for h := range hints {
				hints[h] = map[string]any{"name": fmt.Sprintf("%s-%d", prefix, h)}
			}
			if rng.IntN(2) == 0 {
				hints[len(hints)-1] = hints[0]
			}
			ep["hints"] = map[string]any{field: hints}
		})
	}
}

var sliceMutations = []fuzzMutation{
	{"slice labels", func(rng *rand.Rand, obj map[string]any) { setMeta(obj, "labels", keepServiceName(obj, fuzzMap(rng))) }},
	{"slice annotations", func(rng *rand.Rand, obj map[string]any) { setMeta(obj, "annotations", fuzzMap(rng)) }},
	{"slice ports", func(rng *rand.Rand, obj map[string]any) { obj["ports"] = fuzzPorts(rng, false) }},
	{"slice appProtocol", func(rng *rand.Rand, obj map[string]any) {
		for _, p := range orEmpty(obj["ports"]) {
			if m, ok := p.(map[string]any); ok {
				m["appProtocol"] = fuzzText(rng, 300)
			}
		}
	}},
	{"zone hints", fuzzHints("forZones", "zone")},
	{"node hints", fuzzHints("forNodes", "node")},
	{"zone and node names", func(rng *rand.Rand, obj map[string]any) {
		eachEndpoint(obj, func(i int, ep map[string]any) {
			ep["zone"] = fuzzText(rng, 63+rng.IntN(3)*100)
			ep["nodeName"] = fuzzWord(rng, 253+rng.IntN(2))
		})
	}},
	{"hostnames", func(rng *rand.Rand, obj map[string]any) {
		eachEndpoint(obj, func(i int, ep map[string]any) {
			ep["hostname"] = []string{fuzzWord(rng, 63), fuzzWord(rng, 64), "UPPER", "a.b", "é"}[rng.IntN(5)]
		})
	}},
	{"endpoint count", func(rng *rand.Rand, obj map[string]any) {
		n := 1000 + rng.IntN(2)
		eps := make([]any, n)
		for i := range eps {
			eps[i] = map[string]any{"addresses": []any{fmt.Sprintf("10.29.%d.%d", i/250, i%250+1)}}
		}
		obj["endpoints"] = eps
	}},
	{"addresses per endpoint", func(rng *rand.Rand, obj map[string]any) {
		eachEndpoint(obj, func(i int, ep map[string]any) {
			addrs := make([]any, 100+rng.IntN(2))
			for a := range addrs {
				addrs[a] = fmt.Sprintf("10.28.%d.%d", i%250, a%250+1)
			}
			ep["addresses"] = addrs
		})
	}},
	{"conditions", func(rng *rand.Rand, obj map[string]any) {
		eachEndpoint(obj, func(i int, ep map[string]any) {
			ep["conditions"] = []any{nil, map[string]any{}, map[string]any{"ready": false, "serving": true, "terminating": true}}[rng.IntN(3)]
		})
	}},
	{"address type", func(rng *rand.Rand, obj map[string]any) {
		obj["addressType"] = []string{"FQDN", "IPv6", "bogus", ""}[rng.IntN(4)]
	}},
	{"topology", func(rng *rand.Rand, obj map[string]any) {
		eachEndpoint(obj, func(i int, ep map[string]any) { ep["deprecatedTopology"] = fuzzMap(rng) })
	}},
}

var serviceMutations = []fuzzMutation{
	{"service labels", func(rng *rand.Rand, obj map[string]any) { setMeta(obj, "labels", fuzzMap(rng)) }},
	{"service annotations", func(rng *rand.Rand, obj map[string]any) { setMeta(obj, "annotations", fuzzMap(rng)) }},
	{"service ports", func(rng *rand.Rand, obj map[string]any) { spec(obj)["ports"] = fuzzPorts(rng, true) }},
	{"session affinity", func(rng *rand.Rand, obj map[string]any) {
		s := spec(obj)
		s["sessionAffinity"] = []string{"ClientIP", "Bogus", ""}[rng.IntN(3)]
		s["sessionAffinityConfig"] = map[string]any{"clientIP": map[string]any{"timeoutSeconds": []int{0, 86400, 86401, -1}[rng.IntN(4)]}}
	}},
	{"service type", func(rng *rand.Rand, obj map[string]any) {
		s := spec(obj)
		s["type"] = []string{"ExternalName", "LoadBalancer", "Bogus"}[rng.IntN(3)]
		s["externalName"] = fuzzText(rng, 254)
	}},
	{"ip families", func(rng *rand.Rand, obj map[string]any) {
		spec(obj)["ipFamilies"] = [][]any{{"IPv4", "IPv4"}, {"IPv9"}, {}, {"IPv6", "IPv4", "IPv6"}}[rng.IntN(4)]
		spec(obj)["ipFamilyPolicy"] = []string{"RequireDualStack", "Bogus"}[rng.IntN(2)]
	}},
	{"traffic policies", func(rng *rand.Rand, obj map[string]any) {
		spec(obj)["internalTrafficPolicy"] = []string{"Local", "Bogus", ""}[rng.IntN(3)]
		// Past the API's values, or one that asks the hub for zone hints.
		spec(obj)["trafficDistribution"] = []string{fuzzText(rng, 100), "PreferSameZone", "PreferClose"}[rng.IntN(3)]
	}},
}

var exportMutations = []fuzzMutation{
	{"exported labels", func(rng *rand.Rand, obj map[string]any) { spec(obj)["exportedLabels"] = fuzzMap(rng) }},
	{"exported annotations", func(rng *rand.Rand, obj map[string]any) { spec(obj)["exportedAnnotations"] = fuzzMap(rng) }},
	{"export labels", func(rng *rand.Rand, obj map[string]any) { setMeta(obj, "labels", fuzzMap(rng)) }},
	{"export created", func(rng *rand.Rand, obj map[string]any) {
		md, _ := obj["metadata"].(map[string]any)
		md["creationTimestamp"] = []string{"1970-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "2000-01-01T00:00:00Z"}[rng.IntN(3)]
	}},
}

// keepServiceName keeps a slice's service-name label in labels, so that
// the slice stays its service's (a lie about it is another test's).
func keepServiceName(obj map[string]any, labels map[string]any) map[string]any {
	md, _ := obj["metadata"].(map[string]any)
	if l, ok := md["labels"].(map[string]any); ok {
		if v, ok := l["kubernetes.io/service-name"]; ok {
			labels["kubernetes.io/service-name"] = v
		}
	}
	return labels
}

func spec(obj map[string]any) map[string]any {
	s, _ := obj["spec"].(map[string]any)
	if s == nil {
		s = map[string]any{}
		obj["spec"] = s
	}
	return s
}

func orEmpty(v any) []any {
	l, _ := v.([]any)
	return l
}

// TestFuzzingMemberNeverMakesTheDaemonWriteWhatTheHubRefuses: east
// answers through a proxy that rewrites its Services, EndpointSlices and
// ServiceExports, in lists and in watch events, with values at and just
// past the API's limits (sizes, counts, lengths, hints, ports, unicode,
// reserved keys, empty maps); west exports the same services honestly and
// changes its endpoints every round. After every round west's endpoints
// are in the hub exactly, in its MCS slices and its per-cluster Endpoints,
// and the shared imports list west with its port. At the end the hub's
// audit log shows no answer of 400 or above to a daemon write, but 404 on
// a delete and 409 on an update. -fuzz-seed and -fuzz-rounds replay or
// extend a run.
func TestFuzzingMemberNeverMakesTheDaemonWriteWhatTheHubRefuses(t *testing.T) {
	t.Parallel()
	cs := testenv.StartAllT(t,
		testenv.Spec{Name: "hub", Options: testenv.Options{CRDs: true, Audit: true}},
		testenv.Spec{Name: "east", Options: testenv.Options{CRDs: true}},
		testenv.Spec{Name: "west", Options: testenv.Options{CRDs: true}},
	)
	e := &env{hub: cs[0], east: cs[1], west: cs[2], hubMCS: mcsclientset.NewForConfigOrDie(cs[0].Config)}
	for _, c := range cs {
		mustCreateNamespace(t, c.Client, appNamespace)
	}
	mustCreateNamespace(t, e.hub.Client, daemonNamespace)
	ctx := context.Background()
	east, west := mcsMember(e.east), mcsMember(e.west)
	fz := &memberFuzzer{seed: *fuzzSeed, seen: map[string]bool{}, tried: map[string]int{}}
	proxy := startLiarProxy(t, e.east, fz.rewrite)
	t.Logf("fuzz seed %d, %d rounds (-fuzz-seed, -fuzz-rounds)", *fuzzSeed, *fuzzRounds)

	for i, svc := range fuzzServices {
		for _, m := range []member{east, west} {
			m.service(t, svc, func(s *corev1.Service) { s.Spec.Ports[0].Port = int32(80 + i) })
			m.export(t, svc, nil)
		}
		applySlices(t, e.east.Client, svc, endpointSlice(svc, svc+"-east", 20+i, 3, true))
	}
	setWest := func(round int) {
		for i, svc := range fuzzServices {
			applySlices(t, e.west.Client, svc, endpointSliceAt(svc, svc+"-west", 30+i, round%4, 2+round%3, true))
		}
	}
	setWest(0)
	// West's exports are the oldest (east's count from its registration,
	// however east backdates them, and a second is the timestamps'
	// resolution), so the imports' ports and fields follow west's.
	e.register(t, "west", "west", e.west.Kubeconfig)
	time.Sleep(1100 * time.Millisecond)
	e.register(t, "east", "east", proxy.kubeconfig)
	d := e.startDaemon(t, func(o *app.Options) { o.ExportMode = string(easync.ExportServiceExport) })
	// The audit log is read after a failed round too, before the hub stops:
	// it names the write the hub refused.
	t.Cleanup(func() { checkNoRefusedDaemonWrites(t, e.hub.AuditLogPath) })

	touch := func(round int) {
		r := fmt.Sprint(round)
		patch := []byte(`{"metadata":{"annotations":{"fuzz-round":` + string(mustJSON(r)) + `}}}`)
		for _, svc := range fuzzServices {
			if _, err := e.east.Client.CoreV1().Services(appNamespace).Patch(ctx, svc, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.east.Client.DiscoveryV1().EndpointSlices(appNamespace).Patch(ctx, svc+"-east", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := east.mcs.MulticlusterV1beta1().ServiceExports(appNamespace).Patch(ctx, svc, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	westRight := func(round int) error {
		byService := hubAddresses(t, e)
		for i, svc := range fuzzServices {
			want := sliceAddresses([]discoveryv1.EndpointSlice{*endpointSliceAt(svc, "", 30+i, round%4, 2+round%3, true)})
			slices.Sort(want)
			if got := byService[svc]["west"]; !slices.Equal(got, want) {
				return fmt.Errorf("%s: west's addresses in the hub's MCS slices %v, want %v", svc, got, want)
			}
			got := perClusterAddresses(t, e, svc, "west")
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return fmt.Errorf("%s: west's per-cluster Endpoints %v, want %v", svc, got, want)
			}
			imp, err := e.serviceImport(t, svc)
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(imp.Status.Clusters, func(c mcsv1beta1.ClusterStatus) bool { return c.Cluster == "west" }) {
				return fmt.Errorf("%s: the ServiceImport lists %v, not west", svc, imp.Status.Clusters)
			}
			if !slices.ContainsFunc(imp.Spec.Ports, func(p mcsv1beta1.ServicePort) bool { return p.Name == "http" && p.Port == int32(80+i) }) {
				return fmt.Errorf("%s: the ServiceImport's ports %+v lack west's http:%d", svc, imp.Spec.Ports, 80+i)
			}
		}
		return nil
	}

	eventually(t, waitTimeout, func() error { return westRight(0) })
	for round := 1; round <= *fuzzRounds; round++ {
		fz.next(round)
		touch(round)
		setWest(round)
		eventually(t, waitTimeout, func() error {
			if n := fz.delivered(); n < 3*len(fuzzServices) {
				return fmt.Errorf("round %d: east returned %d rewritten objects, want %d", round, n, 3*len(fuzzServices))
			}
			return westRight(round)
		})
		d.waitSettled(t)
		if err := westRight(round); err != nil {
			t.Fatalf("round %d (seed %d), once settled: %v", round, *fuzzSeed, err)
		}
	}

	fz.mu.Lock()
	t.Logf("%d objects rewritten; mutations tried: %v", fz.rewritten, fz.tried)
	fz.mu.Unlock()
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// checkNoRefusedDaemonWrites fails the test for every daemon write the
// hub's audit log at path shows answered with 400 or above, but 404 on a
// delete and 409 on an update or patch; for every EndpointSlice the daemon
// wrote with hints other than its own, for an endpoint's zone (a member's
// hints describe its own nodes); and when the log shows no daemon write at
// all.
func checkNoRefusedDaemonWrites(t *testing.T, path string) {
	t.Helper()
	writes, sliceWrites, hinted, refused := 0, 0, 0, map[string]int{}
	for _, ev := range auditAnswers(t, path) {
		if !strings.HasPrefix(ev.UserAgent, "endpoint-aggregator/") {
			continue
		}
		writes++
		if ev.ObjectRef.Resource == "endpointslices" && ev.RequestObject != nil {
			sliceWrites++
			for _, ep := range ev.RequestObject.Endpoints {
				if ep.Hints != nil {
					hinted++
				}
				if !ep.hintedForItsZone() {
					t.Errorf("hub audit log: %s endpointslices/%s carries hints %+v for %v in zone %v: a member's hints reached the hub", ev.Verb, ev.ObjectRef.Name, *ep.Hints, ep.Addresses, ep.Zone)
				}
			}
		}
		code := ev.ResponseStatus.Code
		if code < 400 || code == 404 && ev.Verb == "delete" || code == 409 && (ev.Verb == "update" || ev.Verb == "patch") {
			continue
		}
		refused[fmt.Sprintf("%s %s/%s: %d %s", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Name, code, ev.ResponseStatus.Message)]++
	}
	for r, n := range refused {
		t.Errorf("hub refused a daemon write %d times: %s", n, r)
	}
	if writes == 0 {
		t.Errorf("hub audit log %s shows no daemon write: the oracle reads nothing", path)
	}
	if sliceWrites == 0 {
		t.Errorf("hub audit log %s shows no daemon EndpointSlice write with its body: the hints oracle reads nothing", path)
	}
	t.Logf("hub audit log: %d daemon writes (%d of EndpointSlices, %d endpoints hinted), %d kinds refused", writes, sliceWrites, hinted, len(refused))
}
