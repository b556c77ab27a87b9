package sync

import (
	"context"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// simMember is a member cluster of the order explorer: its API server's
// state (truth) and its informers' caches, which see truth only through the
// first list and then through watch events the explorer delivers one by one.
type simMember struct {
	name   string
	rv     int
	truth  memberObjects
	cache  memberObjects
	svcIdx cache.Indexer // cache.services, for the lister
	// pending holds the watch events of truth's changes not delivered yet.
	pending          []memberEvent
	listed, timedOut bool
	listAt           time.Time         // when its first list can complete
	handlers         []replicaHandlers // one set per replica
	statusWrites     int               // ServiceExport status writes
	// down: the member does not answer (since downSince); its watch
	// events wait. broken: its watch broke; a relist catches up.
	down      bool
	downSince time.Time
	broken    bool
	// statusFault decides the fate of a ServiceExport status write.
	statusFault func() error
}

// replicaHandlers are one replica's handlers of a member's informers:
// services, slices, exports.
type replicaHandlers struct {
	ctrl *Controller
	hs   [3]cache.ResourceEventHandler
}

// memberObjects holds one member's objects by kind, then namespace/name.
type memberObjects [3]map[string]runtime.Object

const (
	kindService = iota
	kindSlice
	kindExport
)

type memberEvent struct {
	kind int
	key  string
	obj  runtime.Object // nil: deleted
}

func newMemberObjects() memberObjects {
	return memberObjects{{}, {}, {}}
}

func newSimMember(name string) *simMember {
	return &simMember{name: name, truth: newMemberObjects(), cache: newMemberObjects(),
		svcIdx: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})}
}

// set changes truth: obj is stored under key (nil deletes it), and a watch
// event follows once the member has listed.
func (m *simMember) set(kind int, key string, obj runtime.Object) {
	if obj == nil {
		if _, ok := m.truth[kind][key]; !ok {
			return
		}
		delete(m.truth[kind], key)
	} else {
		m.rv++
		obj = obj.DeepCopyObject()
		om, _ := metaOf(obj)
		om.SetResourceVersion(strconv.Itoa(m.rv))
		m.truth[kind][key] = obj
	}
	if m.listed {
		m.pending = append(m.pending, memberEvent{kind: kind, key: key, obj: obj})
	}
}

// list fills the caches from truth, as the informers' first list does, and
// tells the handlers.
func (m *simMember) list() {
	m.listed = true
	m.pending = nil
	for kind := range m.truth {
		for _, key := range sortedKeys(m.truth[kind]) {
			m.deliver(memberEvent{kind: kind, key: key, obj: m.truth[kind][key]}, true)
		}
	}
}

// deliver applies one watch event to the caches and calls the handler.
func (m *simMember) deliver(ev memberEvent, initial bool) {
	old, had := m.cache[ev.kind][ev.key]
	if ev.obj == nil {
		if !had {
			return
		}
		delete(m.cache[ev.kind], ev.key)
		if ev.kind == kindService {
			_ = m.svcIdx.Delete(old)
		}
		for _, rh := range m.handlers {
			if h := rh.hs[ev.kind]; h != nil {
				h.OnDelete(old)
			}
		}
		return
	}
	obj := ev.obj.DeepCopyObject()
	if ev.kind == kindSlice {
		// The informers' transform: the cache holds projections.
		obj = endpoints.ProjectSlice(obj.(*discoveryv1.EndpointSlice))
	}
	m.cache[ev.kind][ev.key] = obj
	if ev.kind == kindService {
		_ = m.svcIdx.Update(obj)
	}
	for _, rh := range m.handlers {
		h := rh.hs[ev.kind]
		switch {
		case h == nil:
		case had:
			h.OnUpdate(old, obj)
		default:
			h.OnAdd(obj, initial)
		}
	}
}

func sortedKeys(objs map[string]runtime.Object) []string {
	keys := make([]string, 0, len(objs))
	for k := range objs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// The Member interface, read from the caches.

func (m *simMember) HasSynced() bool    { return m.listed }
func (m *simMember) SyncTimedOut() bool { return m.timedOut && !m.listed }
func (m *simMember) ServiceLister() corelisters.ServiceLister {
	return corelisters.NewServiceLister(m.svcIdx)
}

func (m *simMember) EndpointSlices(ns, svc string) ([]*endpoints.MemberSlice, error) {
	var out []*endpoints.MemberSlice
	for _, key := range sortedKeys(m.cache[kindSlice]) {
		s := m.cache[kindSlice][key].(*endpoints.MemberSlice)
		if s.Namespace == ns && s.Labels[discoveryv1.LabelServiceName] == svc {
			out = append(out, s)
		}
	}
	return out, nil
}

func (m *simMember) ServiceExports() ([]*mcsv1beta1.ServiceExport, error) {
	var out []*mcsv1beta1.ServiceExport
	for _, key := range sortedKeys(m.cache[kindExport]) {
		out = append(out, m.cache[kindExport][key].(*mcsv1beta1.ServiceExport))
	}
	return out, nil
}

func (m *simMember) ServiceExport(ns, name string) *mcsv1beta1.ServiceExport {
	if o, ok := m.cache[kindExport][ns+"/"+name]; ok {
		return o.(*mcsv1beta1.ServiceExport)
	}
	return nil
}

// PatchServiceExportConditions writes the conditions to the member's
// ServiceExport; the change comes back as a watch event.
func (m *simMember) PatchServiceExportConditions(_ context.Context, se *mcsv1beta1.ServiceExport, conds []metav1.Condition) error {
	if m.statusFault != nil {
		if err := m.statusFault(); err != nil {
			return err
		}
	}
	key := se.Namespace + "/" + se.Name
	cur := m.truthExport(se.Namespace, se.Name)
	if cur == nil || cur.UID != se.UID {
		return apierrors.NewNotFound(schema.GroupResource{Group: mcsv1beta1.GroupName, Resource: "serviceexports"}, se.Name)
	}
	upd := cur.DeepCopy()
	upd.Status.Conditions = conds
	m.set(kindExport, key, upd)
	m.statusWrites++
	return nil
}

// truthService and friends read truth.
func (m *simMember) truthService(ns, name string) *corev1.Service {
	if o, ok := m.truth[kindService][ns+"/"+name]; ok {
		return o.(*corev1.Service)
	}
	return nil
}

func (m *simMember) truthExport(ns, name string) *mcsv1beta1.ServiceExport {
	if o, ok := m.truth[kindExport][ns+"/"+name]; ok {
		return o.(*mcsv1beta1.ServiceExport)
	}
	return nil
}

func (m *simMember) truthSlices(ns, svc string) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, key := range sortedKeys(m.truth[kindSlice]) {
		s := m.truth[kindSlice][key].(*discoveryv1.EndpointSlice)
		if s.Namespace == ns && s.Labels[discoveryv1.LabelServiceName] == svc {
			out = append(out, s)
		}
	}
	return out
}

// projectAll returns the projections of list.
func projectAll(list []*discoveryv1.EndpointSlice) []*endpoints.MemberSlice {
	out := make([]*endpoints.MemberSlice, len(list))
	for i, s := range list {
		out[i] = endpoints.ProjectSlice(s)
	}
	return out
}

// simMembers is the explorer's member registry.
type simMembers = memberSet[*simMember]
