package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// tracker watches the aggregated objects in one hub and tells when the hub
// holds everything expected, and when a changed member endpoint shows up in
// a hub EndpointSlice. It sees the hub as any client does: through watches.
type tracker struct {
	name         string
	perCluster   bool
	members      map[string]int
	services     map[string]int
	derivedNames map[string]int
	nServices    int
	wantEps      int // endpoints in a member service's hub slices
	wantAddrs    int // addresses in its per-cluster Endpoints
	wantClusters int // clusters in each ServiceImport's status

	mu           sync.Mutex
	keys         []keyState // m*nServices+s
	sliceContrib map[string]contrib
	epsContrib   map[string]contrib
	svcKey       map[string]int
	importN      []int
	derivedOK    []bool
	okKeys       int
	okServices   int
	convergedAt  time.Time
	awaited      map[string]*pending

	// rvChanges counts the changes of our hub objects seen by the watches
	// (creates, updates that moved the resourceVersion, deletes).
	rvChanges atomic.Int64
	stop      chan struct{}
}

type keyState struct {
	sliceEps, addrs int
	svc, ok         bool
}

type contrib struct{ key, n int }

// pending is one changed member endpoint awaited in the hub.
type pending struct {
	ip         string
	t0         time.Time
	seen       time.Time
	done       chan struct{}
	superseded bool
}

// latency returns how long the change took to show, and whether it did.
func (p *pending) latency() (time.Duration, bool) {
	select {
	case <-p.done:
		return p.seen.Sub(p.t0), !p.superseded
	default:
		return 0, false
	}
}

func newTracker(name string, f *fleet, mode endpoints.PerClusterMode) *tracker {
	t := &tracker{
		name:         name,
		perCluster:   mode != endpoints.PerClusterOff,
		members:      map[string]int{},
		services:     map[string]int{},
		derivedNames: map[string]int{},
		nServices:    len(f.services),
		wantEps:      f.perSvc,
		wantAddrs:    min(f.perSvc, endpoints.MaxEndpointsAddresses),
		wantClusters: len(f.members),
		keys:         make([]keyState, len(f.members)*len(f.services)),
		sliceContrib: map[string]contrib{},
		epsContrib:   map[string]contrib{},
		svcKey:       map[string]int{},
		importN:      make([]int, len(f.services)),
		derivedOK:    make([]bool, len(f.services)),
		awaited:      map[string]*pending{},
		stop:         make(chan struct{}),
	}
	for i, m := range f.members {
		t.members[m] = i
	}
	for s := range f.services {
		t.services[serviceName(s)] = s
		t.derivedNames[endpoints.DerivedServiceName(appNamespace, serviceName(s))] = s
	}
	return t
}

// start runs the hub watches until stop and waits for their first list.
func (t *tracker) start(ctx context.Context, hub kubernetes.Interface, hubMCS mcsclientset.Interface) error {
	ours := labels.Set{endpoints.LabelManagedBy: endpoints.ManagedByValue}.String()
	strip := informers.WithTransform(func(obj any) (any, error) {
		if m, err := meta.Accessor(obj); err == nil {
			m.SetManagedFields(nil)
		}
		return obj, nil
	})
	kf := informers.NewSharedInformerFactoryWithOptions(hub, 0, informers.WithNamespace(appNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = ours }), strip)
	sf := informers.NewSharedInformerFactoryWithOptions(hub, 0, informers.WithNamespace(appNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{discoveryv1.LabelManagedBy: endpoints.SliceManagedByValue}.String()
		}), strip)
	mf := mcsinformers.NewSharedInformerFactoryWithOptions(hubMCS, 0, mcsinformers.WithNamespace(appNamespace),
		mcsinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = ours }))

	handlers := []struct {
		inf cache.SharedIndexInformer
		f   func(obj any, deleted bool)
	}{
		{sf.Discovery().V1().EndpointSlices().Informer(), t.onSlice},
		{kf.Core().V1().Endpoints().Informer(), t.onEndpoints},
		{kf.Core().V1().Services().Informer(), t.onService},
		{mf.Multicluster().V1beta1().ServiceImports().Informer(), t.onImport},
	}
	var synced []cache.InformerSynced
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(t.handler(h.f)); err != nil {
			return err
		}
		synced = append(synced, h.inf.HasSynced)
	}
	kf.Start(t.stop)
	sf.Start(t.stop)
	mf.Start(t.stop)
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), synced...) {
		return fmt.Errorf("%s: hub watches did not sync", t.name)
	}
	return nil
}

func (t *tracker) close() {
	if t != nil {
		select {
		case <-t.stop:
		default:
			close(t.stop)
		}
	}
}

func (t *tracker) handler(f func(obj any, deleted bool)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			t.rvChanges.Add(1)
			f(obj, false)
		},
		UpdateFunc: func(old, cur any) {
			o, _ := meta.Accessor(old)
			n, _ := meta.Accessor(cur)
			if o != nil && n != nil && o.GetResourceVersion() == n.GetResourceVersion() {
				return
			}
			t.rvChanges.Add(1)
			f(cur, false)
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			t.rvChanges.Add(1)
			f(obj, true)
		},
	}
}

// key maps labels naming a source cluster and a service to a key index.
func (t *tracker) key(cluster, service string) (int, bool) {
	m, ok1 := t.members[cluster]
	s, ok2 := t.services[service]
	return m*t.nServices + s, ok1 && ok2
}

func (t *tracker) onSlice(obj any, deleted bool) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	now := time.Now()
	k, known := t.key(s.Labels[mcsv1beta1.LabelSourceCluster], s.Labels[mcsv1beta1.LabelServiceName])
	t.mu.Lock()
	defer t.mu.Unlock()
	if !deleted && len(t.awaited) > 0 {
		for i := range s.Endpoints {
			for _, ip := range s.Endpoints[i].Addresses {
				if p := t.awaited[ip]; p != nil {
					p.seen = now
					close(p.done)
					delete(t.awaited, ip)
				}
			}
		}
	}
	if !known {
		return
	}
	name := s.Name
	if c, ok := t.sliceContrib[name]; ok {
		t.keys[c.key].sliceEps -= c.n
		t.update(c.key, now)
		delete(t.sliceContrib, name)
	}
	if !deleted {
		t.sliceContrib[name] = contrib{key: k, n: len(s.Endpoints)}
		t.keys[k].sliceEps += len(s.Endpoints)
		t.update(k, now)
	}
}

func (t *tracker) onEndpoints(obj any, deleted bool) {
	e, ok := obj.(*corev1.Endpoints)
	if !ok {
		return
	}
	k, known := t.key(e.Labels[endpoints.LabelSourceCluster], e.Labels[endpoints.LabelServiceName])
	if !known {
		return
	}
	n := 0
	for _, ss := range e.Subsets {
		n += len(ss.Addresses) + len(ss.NotReadyAddresses)
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.epsContrib[e.Name]; ok {
		t.keys[c.key].addrs -= c.n
		t.update(c.key, now)
		delete(t.epsContrib, e.Name)
	}
	if !deleted {
		t.epsContrib[e.Name] = contrib{key: k, n: n}
		t.keys[k].addrs += n
		t.update(k, now)
	}
}

func (t *tracker) onService(obj any, deleted bool) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.derivedNames[svc.Name]; ok && svc.Labels[endpoints.LabelSourceCluster] == "" {
		t.derivedOK[s] = !deleted
		t.updateService(s, now)
		return
	}
	k, known := t.key(svc.Labels[endpoints.LabelSourceCluster], svc.Labels[endpoints.LabelServiceName])
	if !known {
		return
	}
	if deleted {
		delete(t.svcKey, svc.Name)
	} else {
		t.svcKey[svc.Name] = k
	}
	t.keys[k].svc = !deleted
	t.update(k, now)
}

func (t *tracker) onImport(obj any, deleted bool) {
	si, ok := obj.(*mcsv1beta1.ServiceImport)
	if !ok {
		return
	}
	s, known := t.services[si.Name]
	if !known {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.importN[s] = len(si.Status.Clusters)
	if deleted {
		t.importN[s] = 0
	}
	t.updateService(s, now)
}

// update recomputes whether key k is as expected; t.mu is held.
func (t *tracker) update(k int, now time.Time) {
	st := &t.keys[k]
	ok := st.sliceEps == t.wantEps && (!t.perCluster || st.addrs == t.wantAddrs && st.svc)
	if ok == st.ok {
		return
	}
	st.ok = ok
	if ok {
		t.okKeys++
	} else {
		t.okKeys--
	}
	t.noteConverged(now)
}

func (t *tracker) updateService(_ int, now time.Time) {
	// Services are few: recount them.
	n := 0
	for i := range t.importN {
		if t.importN[i] == t.wantClusters && t.derivedOK[i] {
			n++
		}
	}
	t.okServices = n
	t.noteConverged(now)
}

func (t *tracker) noteConverged(now time.Time) {
	if t.unmetLocked() == 0 {
		if t.convergedAt.IsZero() {
			t.convergedAt = now
		}
	} else {
		t.convergedAt = time.Time{}
	}
}

// unmetLocked returns how many member services and clusterset services are
// not yet as expected in the hub. t.mu must be held.
func (t *tracker) unmetLocked() int {
	return len(t.keys) - t.okKeys + t.nServices - t.okServices
}

// waitConverged waits until the hub holds everything expected and returns
// when the watch event completing it arrived.
func (t *tracker) waitConverged(ctx context.Context, timeout time.Duration, progress string) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	lastLog := time.Now()
	for {
		t.mu.Lock()
		at, unmet := t.convergedAt, t.unmetLocked()
		t.mu.Unlock()
		if unmet == 0 {
			return at, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s: hub not converged after %s: %d of %d member services and clusterset services still differ",
				t.name, timeout, unmet, len(t.keys)+t.nServices)
		}
		if progress != "" && time.Since(lastLog) > 10*time.Second {
			logf("%s: %d of %d member and clusterset services still to converge", progress, unmet, len(t.keys)+t.nServices)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitEmpty waits until the watches show none of the expected hub objects
// in place: the hub was emptied and a cold convergence can be timed again.
func (t *tracker) waitEmpty(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		t.mu.Lock()
		left := t.okKeys + t.okServices
		t.mu.Unlock()
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d member services and clusterset services still in the emptied hub after %s", t.name, left, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// expect registers a member endpoint address to wait for in hub slices.
func (t *tracker) expect(ip string, t0 time.Time) *pending {
	p := &pending{ip: ip, t0: t0, done: make(chan struct{})}
	t.mu.Lock()
	t.awaited[ip] = p
	t.mu.Unlock()
	return p
}

// supersede stops waiting for an address replaced before the hub showed
// it: the hub may rightly never show it.
func (t *tracker) supersede(ip string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.awaited[ip]; p != nil {
		p.superseded = true
		p.seen = time.Now()
		close(p.done)
		delete(t.awaited, ip)
	}
}

// forget stops waiting for an address whose member write failed.
func (t *tracker) forget(ip string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.awaited, ip)
}

// waitAll waits until every pending change showed or timeout passed; it
// returns how many are still missing.
func waitAll(ctx context.Context, ps []*pending, timeout time.Duration) int {
	deadline := time.After(timeout)
	missing := 0
	for _, p := range ps {
		select {
		case <-p.done:
		case <-deadline:
			missing++
		case <-ctx.Done():
			missing++
		}
	}
	return missing
}
