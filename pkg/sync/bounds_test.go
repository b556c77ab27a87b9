package sync

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/record"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

func TestExportLedgerKeepsTheOldestExports(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(1000+s), 0) }
	k := func(name string) Key { return Key{Cluster: "c1", Namespace: "shop", Name: name} }
	l := newMemberStates(2, 10)

	// The newest first: admitted while the member is within its bounds.
	for _, tc := range []struct {
		name    string
		created int
		n       int
		admit   bool
	}{{"c", 3, 1, true}, {"b", 2, 1, true}} {
		if why := l.judge(k(tc.name), at(tc.created), tc.n, nil); (why == "") != tc.admit {
			t.Fatalf("judge(%s) = %q", tc.name, why)
		}
		if again, _ := l.recordExport(k(tc.name), &ledgerEntry{created: at(tc.created), endpoints: tc.n, admitted: true}); len(again) != 0 {
			t.Fatalf("record(%s) asks to sync %v again", tc.name, again)
		}
	}
	// An older export past the bound is admitted, and the newest must go.
	if why := l.judge(k("a"), at(1), 1, nil); why != "" {
		t.Fatalf("the oldest export refused: %s", why)
	}
	again, _ := l.recordExport(k("a"), &ledgerEntry{created: at(1), endpoints: 1, admitted: true})
	if !slices.Equal(again, []Key{k("c")}) {
		t.Fatalf("record(a) asks to sync %v again, want [c]", again)
	}
	why := l.judge(k("c"), at(3), 1, nil)
	if !strings.Contains(why, "--max-member-services=2") || !strings.Contains(why, "its 2 oldest exports are imported") {
		t.Fatalf("judge(c) = %q, want it refused past --max-member-services=2", why)
	}
	if again, wasRefused := l.recordExport(k("c"), &ledgerEntry{created: at(3), endpoints: 1}); len(again) != 0 || wasRefused {
		t.Fatalf("record(c refused) = %v, %v", again, wasRefused)
	}
	if got := l.totals()["c1"]; got != (memberTotals{services: 2, endpoints: 2, refusedServices: 1}) {
		t.Errorf("totals %v, want 2 admitted with 2 endpoints, 1 refused", got)
	}
	// An export that grows past the endpoint bound goes, and so do the
	// newer ones; the older stays.
	if why := l.judge(k("b"), at(2), 10, nil); !strings.Contains(why, "--max-member-endpoints=10") {
		t.Fatalf("judge(b with 10 endpoints) = %q, want it refused past --max-member-endpoints=10", why)
	}
	// The oldest unexported: c fits again.
	again, _ = l.recordExport(k("a"), nil)
	if !slices.Equal(again, []Key{k("c")}) {
		t.Fatalf("after a left, record asks to sync %v again, want [c]", again)
	}
	if why := l.judge(k("c"), at(3), 1, nil); why != "" {
		t.Fatalf("c still refused with room: %s", why)
	}
	if _, wasRefused := l.recordExport(k("c"), &ledgerEntry{created: at(3), endpoints: 1, admitted: true}); !wasRefused {
		t.Error("c's admission after a refusal is not reported")
	}
	// Another member is not affected by this one.
	if why := l.judge(Key{Cluster: "c2", Namespace: "shop", Name: "x"}, at(0), 5, nil); why != "" {
		t.Errorf("another member refused: %s", why)
	}
}

// An export is judged against the member's census until its keys have
// synced: the newest is refused though it syncs first; each key's sync
// replaces its part of the census; a withdrawal unread drops the census.
func TestExportLedgerJudgesAgainstTheCensus(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(1000+s), 0) }
	k := func(name string) Key { return Key{Cluster: "c1", Namespace: "shop", Name: name} }
	census := map[Key]ledgerEntry{k("a"): {created: at(1), endpoints: 1}, k("b"): {created: at(2), endpoints: 1}, k("c"): {created: at(3), endpoints: 1}}
	l := newMemberStates(2, 0)
	if !l.needsCensus("c1") {
		t.Fatal("a member never synced needs no census")
	}
	if why := l.judge(k("c"), at(3), 1, census); !strings.Contains(why, "--max-member-services=2") {
		t.Fatalf("judge(c, newest of three) = %q, want it refused", why)
	}
	seeded := l.seedCensus("c1", census)
	slices.SortFunc(seeded, func(x, y Key) int { return strings.Compare(x.Name, y.Name) })
	if !slices.Equal(seeded, []Key{k("a"), k("b"), k("c")}) || l.needsCensus("c1") {
		t.Fatalf("seedCensus = %v, needsCensus %v", seeded, l.needsCensus("c1"))
	}
	if again, _ := l.recordExport(k("c"), &ledgerEntry{created: at(3), endpoints: 1}); len(again) != 0 {
		t.Fatalf("record(c refused) asks to sync %v again", again)
	}
	if got := l.totals()["c1"]; got != (memberTotals{refusedServices: 1}) {
		t.Errorf("totals %v, want the census out of the gauges: 1 refused", got)
	}
	// a goes: c fits.
	if why := l.judge(k("c"), at(3), 1, nil); why == "" {
		t.Fatal("c admitted while a and b are exported")
	}
	if again, _ := l.recordExport(k("a"), nil); !slices.Equal(again, []Key{k("c")}) {
		t.Fatalf("after a left, record asks to sync %v again, want [c]", again)
	}
	if why := l.judge(k("c"), at(3), 1, nil); why != "" {
		t.Fatalf("c refused with room: %s", why)
	}
	l.forgetCensus("c1")
	if !l.needsCensus("c1") {
		t.Error("a member withdrawn unread needs no census")
	}
}

// Whatever order a member's keys are synced in, the member ends with its
// oldest exports imported and the rest refused, each refusal visible; the
// other members are untouched.
func TestSyncBoundsKeepTheOldestExportsInAnyOrder(t *testing.T) {
	const services, maxServices = 6, 4
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rec := record.NewFakeRecorder(100)
			reg := prometheus.NewRegistry()
			f := newFixture(t, Options{Export: ExportPolicy{Mode: ExportServiceExport, Exclude: sets.New(DefaultExcludedNamespaces...)},
				MaxMemberServices: maxServices, MaxMemberEndpoints: 1000, WriteExportStatus: true, Recorder: rec, Metrics: NewMetrics(reg)}, nil, nil)
			reg.MustRegister(f.ctrl)
			var keys []Key
			for _, cluster := range []string{"c1", "c2"} {
				m := f.member(cluster)
				m.registered = time.Unix(500, 0)
				n := services
				if cluster == "c2" {
					n = 2
				}
				for i := range n {
					name := fmt.Sprintf("svc-%d", i)
					_ = m.services.Add(service("shop", name))
					m.exports["shop/"+name] = &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name,
						CreationTimestamp: metav1.NewTime(time.Unix(int64(1000+i), 0))}}
					m.slices = append(m.slices, memberSlice("shop", name, name+"-x", 100*i, 2, true))
					keys = append(keys, Key{Cluster: cluster, Namespace: "shop", Name: name})
				}
			}
			rnd := rand.New(rand.NewPCG(seed, 0))
			rnd.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			for _, k := range keys {
				f.sync(k)
			}
			f.drain()

			imported := importedServices(f)
			if want := []string{"svc-0", "svc-1", "svc-2", "svc-3"}; !slices.Equal(imported["c1"], want) {
				t.Errorf("c1 imported %v, want its %d oldest %v", imported["c1"], maxServices, want)
			}
			if want := []string{"svc-0", "svc-1"}; !slices.Equal(imported["c2"], want) {
				t.Errorf("c2 imported %v, want all of %v", imported["c2"], want)
			}
			if n := gathered(t, reg, "endpoint_aggregator_refused_member_services", "cluster", "c1"); n != services-maxServices {
				t.Errorf("refused_member_services{c1} = %v, want %d", n, services-maxServices)
			}
			refusedEvents := map[string]bool{}
			for _, e := range drainEvents(rec) {
				if strings.Contains(e, ReasonExportRefused) {
					refusedEvents[e] = true
				}
			}
			if len(refusedEvents) == 0 {
				t.Error("no ExportRefused Event")
			}
			for _, name := range []string{"svc-4", "svc-5"} {
				st := f.members.members["c1"].exports["shop/"+name].Status.Conditions
				if i := slices.IndexFunc(st, func(c metav1.Condition) bool { return c.Type == "Ready" }); i < 0 || st[i].Reason != "Failed" || !strings.Contains(st[i].Message, "--max-member-services=4") {
					t.Errorf("c1's refused export %s has conditions %+v, want Ready=False naming the bound", name, st)
				}
			}

			// The oldest export goes: the oldest refused one takes its
			// place, though nothing else of it changed.
			c1 := f.members.members["c1"]
			delete(c1.exports, "shop/svc-0")
			f.sync(Key{Cluster: "c1", Namespace: "shop", Name: "svc-0"})
			f.drain()
			if got, want := importedServices(f)["c1"], []string{"svc-1", "svc-2", "svc-3", "svc-4"}; !slices.Equal(got, want) {
				t.Errorf("after svc-0 was unexported, c1 imported %v, want %v", got, want)
			}
			// An export older than all arrives: the newest imported goes.
			_ = c1.services.Add(service("shop", "svc-old"))
			c1.exports["shop/svc-old"] = &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "svc-old",
				CreationTimestamp: metav1.NewTime(time.Unix(900, 0))}}
			f.sync(Key{Cluster: "c1", Namespace: "shop", Name: "svc-old"})
			f.drain()
			if got, want := importedServices(f)["c1"], []string{"svc-1", "svc-2", "svc-3", "svc-old"}; !slices.Equal(got, want) {
				t.Errorf("after an older export came, c1 imported %v, want %v", got, want)
			}
		})
	}
}

// importedServices lists, per source cluster, the services the hub's MCS
// slices hold endpoints of, sorted.
func importedServices(f *fixture) map[string][]string {
	f.t.Helper()
	list, err := f.hub.DiscoveryV1().EndpointSlices("shop").List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	imported := map[string][]string{}
	for _, s := range list.Items {
		c := s.Labels[mcsv1beta1.LabelSourceCluster]
		imported[c] = append(imported[c], s.Labels[mcsv1beta1.LabelServiceName])
	}
	for c := range imported {
		slices.Sort(imported[c])
		imported[c] = slices.Compact(imported[c])
	}
	return imported
}
