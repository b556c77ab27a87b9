package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// floor is a bare client that writes into its own hub exactly the objects
// the daemon writes (the same kinds, names, labels and content, computed by
// the daemon's own pure package), with the daemon's client QPS and burst
// and its number of workers, and nothing else: no member informers per
// cluster, no hub caches, no comparisons. It also keeps the member liveness
// Leases the daemon keeps, at the same rate (keepLeases). Its times are what the API server
// allows; the daemon is measured against them.
type floor struct {
	f      *fleet
	mode   endpoints.PerClusterMode
	hub    kubernetes.Interface
	hubMCS mcsclientset.Interface
	// leases writes the member Leases (keepLeases).
	leases  kubernetes.Interface
	workers int
	keys    []*floorKey // m*len(services)+s
	writes  atomic.Int64
	// leaseWrites counts the member Lease writes (see keepLeases).
	leaseWrites atomic.Int64
}

// floorKey is what the floor last wrote for one member service.
type floorKey struct {
	mu sync.Mutex
	// slices are digests of the written slices, what PlanSlices reads (the
	// daemon's hub cache holds the same).
	slices []*endpoints.SliceDigest
	eps    *corev1.Endpoints
}

func newFloor(f *fleet, mode endpoints.PerClusterMode, hubCfg *rest.Config, qps float32, burst, workers int) (*floor, error) {
	cfg := rest.CopyConfig(hubCfg)
	cfg.QPS, cfg.Burst = qps, burst
	cfg.UserAgent = "endpoint-aggregator-bench-floor"
	// The daemon's client settings, so that the floor differs from it only
	// in what it does.
	hub, err := kubernetes.NewForConfig(clusters.WithProtobuf(cfg))
	if err != nil {
		return nil, err
	}
	hubMCS, err := mcsclientset.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	leaseCfg := rest.CopyConfig(cfg)
	leaseCfg.QPS, leaseCfg.Burst = memberLeaseQPS, memberLeaseBurst
	leases, err := kubernetes.NewForConfig(clusters.WithProtobuf(leaseCfg))
	if err != nil {
		return nil, err
	}
	fl := &floor{f: f, mode: mode, hub: hub, hubMCS: hubMCS, leases: leases, workers: workers}
	for range len(f.members) * len(f.services) {
		fl.keys = append(fl.keys, &floorKey{})
	}
	return fl, nil
}

// source projects the member slices, as the daemon's member caches do.
func (fl *floor) source(m, s int, slices []*discoveryv1.EndpointSlice) endpoints.Source {
	src := endpoints.Source{Cluster: fl.f.members[m], Service: fl.f.services[s]}
	for _, sl := range slices {
		src.Slices = append(src.Slices, endpoints.ProjectSlice(sl))
	}
	return src
}

// coldJobs computes every hub object up front and returns one job per
// member service and per clusterset service, each writing its objects in
// the daemon's order. Nothing is computed while the clock runs.
func (fl *floor) coldJobs() []func(context.Context) error {
	jobs := fl.clusterSetJobs()
	nS := len(fl.f.services)
	for m := range fl.f.members {
		for s := range nS {
			jobs = append(jobs, fl.memberJob(m, s, fl.source(m, s, fl.f.memberSlices(m, s))))
		}
	}
	return jobs
}

// clusterSetJobs computes every ServiceImport and derived Service up front
// and returns one job per clusterset service that writes them.
func (fl *floor) clusterSetJobs() []func(context.Context) error {
	var jobs []func(context.Context) error
	for s := range fl.f.services {
		var exports []endpoints.Export
		for _, m := range fl.f.members {
			svc := fl.f.services[s]
			exports = append(exports, endpoints.Export{Cluster: m, Service: svc, Created: svc.CreationTimestamp})
		}
		res := endpoints.MergeImport(appNamespace, serviceName(s), exports)
		jobs = append(jobs, func(ctx context.Context) error { return fl.writeClusterSet(ctx, res) })
	}
	return jobs
}

// memberJob computes the hub objects of member service (m, s) from src and
// returns the job that writes them in the daemon's order.
func (fl *floor) memberJob(m, s int, src endpoints.Source) func(context.Context) error {
	var svc *corev1.Service
	var eps *corev1.Endpoints
	if fl.mode != endpoints.PerClusterOff {
		svc = endpoints.PerClusterService(src, fl.mode)
		eps = endpoints.PerClusterEndpoints(src)
	}
	plan := endpoints.PlanSlices(src, endpoints.Locality{}, nil)
	fk := fl.keys[m*len(fl.f.services)+s]
	return func(ctx context.Context) error {
		fk.mu.Lock()
		defer fk.mu.Unlock()
		if svc != nil {
			if _, err := fl.hub.CoreV1().Services(appNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				return err
			}
			fl.writes.Add(1)
			out, err := fl.hub.CoreV1().Endpoints(appNamespace).Create(ctx, eps, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			fl.writes.Add(1)
			fk.eps = out
		}
		for _, sl := range plan.Create {
			out, err := fl.hub.DiscoveryV1().EndpointSlices(appNamespace).Create(ctx, sl, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			fl.writes.Add(1)
			fk.slices = append(fk.slices, endpoints.DigestSlice(out))
		}
		return nil
	}
}

// writeClusterSet writes a ServiceImport and its derived Service the way the
// daemon must: the import first (the derived Service's owner reference
// needs its UID), then the derived Service, then the import's IPs, then its
// status (a subresource).
func (fl *floor) writeClusterSet(ctx context.Context, res endpoints.ImportResult) error {
	api := fl.hubMCS.MulticlusterV1beta1().ServiceImports(appNamespace)
	fresh := res.Import.DeepCopy()
	fresh.Status = mcsv1beta1.ServiceImportStatus{}
	imp, err := api.Create(ctx, fresh, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	fl.writes.Add(1)
	derived := endpoints.DerivedService(res.Import)
	derived.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: mcsv1beta1.GroupVersion.String(), Kind: mcsv1beta1.ServiceImportKindName, Name: imp.Name, UID: imp.UID,
	}}
	svc, err := fl.hub.CoreV1().Services(appNamespace).Create(ctx, derived, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	fl.writes.Add(1)
	upd := imp.DeepCopy()
	if res.Import.Spec.Type != mcsv1beta1.Headless {
		upd.Spec.IPs = svc.Spec.ClusterIPs
	}
	imp, err = api.Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	fl.writes.Add(1)
	st := imp.DeepCopy()
	st.Status.Clusters = res.Import.Status.Clusters
	st.Status.Conditions, _ = endpoints.SetConditions(nil, endpoints.ImportConditions(res.Conflicts, imp.Generation))
	if _, err := api.UpdateStatus(ctx, st, metav1.UpdateOptions{}); err != nil {
		return err
	}
	fl.writes.Add(1)
	return nil
}

// forget drops what the floor wrote, once its hub was emptied.
func (fl *floor) forget() {
	for _, fk := range fl.keys {
		fk.mu.Lock()
		fk.slices, fk.eps = nil, nil
		fk.mu.Unlock()
	}
}

// cold writes every object with the floor's workers.
func (fl *floor) cold(ctx context.Context, jobs []func(context.Context) error) error {
	return parallel(ctx, fl.workers, len(jobs), func(ctx context.Context, i int) error {
		if err := jobs[i](ctx); err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		return nil
	})
}

// floorController is the floor for changes: one watch of every member
// slice; on an update it writes the member service's hub slices (first: they
// are what is measured) and its per-cluster Endpoints, with the floor's
// workers and client.
type floorController struct {
	stop   chan struct{}
	queue  workqueue.TypedInterface[int]
	wg     sync.WaitGroup
	errors atomic.Int64
}

const sliceKeyIndex = "bench-key"

// startController watches the member's slices through memberCfg (a view of
// every member) and keeps the floor hub in line.
func (fl *floor) startController(ctx context.Context, memberCfg *rest.Config) (*floorController, error) {
	cfg := rest.CopyConfig(memberCfg)
	cfg.QPS, cfg.Burst = 1000, 2000
	member, err := kubernetes.NewForConfig(clusters.WithProtobuf(cfg))
	if err != nil {
		return nil, err
	}
	nS := len(fl.f.services)
	members := map[string]int{}
	for i, m := range fl.f.members {
		members[m] = i
	}
	services := map[string]int{}
	for s := range nS {
		services[serviceName(s)] = s
	}
	keyOf := func(sl *discoveryv1.EndpointSlice) (int, bool) {
		m, ok1 := members[sl.Labels[memberLabel]]
		s, ok2 := services[sl.Labels[discoveryv1.LabelServiceName]]
		return m*nS + s, ok1 && ok2
	}
	fc := &floorController{stop: make(chan struct{}), queue: workqueue.NewTyped[int]()}
	factory := informers.NewSharedInformerFactoryWithOptions(member, 0, informers.WithNamespace(appNamespace))
	inf := factory.Discovery().V1().EndpointSlices().Informer()
	if err := inf.AddIndexers(cache.Indexers{sliceKeyIndex: func(obj any) ([]string, error) {
		if sl, ok := obj.(*discoveryv1.EndpointSlice); ok {
			if k, ok := keyOf(sl); ok {
				return []string{fmt.Sprint(k)}, nil
			}
		}
		return nil, nil
	}}); err != nil {
		return nil, err
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, cur any) {
		if sl, ok := cur.(*discoveryv1.EndpointSlice); ok {
			if k, ok := keyOf(sl); ok {
				fc.queue.Add(k)
			}
		}
	}}); err != nil {
		return nil, err
	}
	factory.Start(fc.stop)
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), inf.HasSynced) {
		fc.close()
		return nil, fmt.Errorf("floor: member watch did not sync")
	}
	for range fl.workers {
		fc.wg.Go(func() {
			for {
				k, quit := fc.queue.Get()
				if quit {
					return
				}
				objs, _ := inf.GetIndexer().ByIndex(sliceKeyIndex, fmt.Sprint(k))
				var slices []*discoveryv1.EndpointSlice
				for _, o := range objs {
					slices = append(slices, o.(*discoveryv1.EndpointSlice))
				}
				if err := fl.sync(ctx, k, slices); err != nil {
					fc.errors.Add(1)
					logf("floor: %v", err)
				}
				fc.queue.Done(k)
			}
		})
	}
	return fc, nil
}

func (fc *floorController) close() {
	if fc == nil {
		return
	}
	select {
	case <-fc.stop:
		return
	default:
	}
	close(fc.stop)
	fc.queue.ShutDown()
	fc.wg.Wait()
}

// sync writes member service k's hub slices and Endpoints from the member's
// slices: the slice writes the daemon's planner asks for, then the
// Endpoints.
func (fl *floor) sync(ctx context.Context, k int, memberSlices []*discoveryv1.EndpointSlice) error {
	nS := len(fl.f.services)
	src := fl.source(k/nS, k%nS, memberSlices)
	fk := fl.keys[k]
	fk.mu.Lock()
	defer fk.mu.Unlock()
	plan := endpoints.PlanSlices(src, endpoints.Locality{}, fk.slices)
	api := fl.hub.DiscoveryV1().EndpointSlices(appNamespace)
	byName := map[string]*endpoints.SliceDigest{}
	for _, s := range fk.slices {
		byName[s.Name] = s
	}
	for _, s := range plan.Create {
		out, err := api.Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		fl.writes.Add(1)
		byName[out.Name] = endpoints.DigestSlice(out)
	}
	for _, s := range plan.Update {
		out, err := api.Update(ctx, s, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		fl.writes.Add(1)
		byName[out.Name] = endpoints.DigestSlice(out)
	}
	for _, s := range plan.Delete {
		if err := api.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		fl.writes.Add(1)
		delete(byName, s.Name)
	}
	fk.slices = fk.slices[:0]
	for _, s := range byName {
		fk.slices = append(fk.slices, s)
	}
	if fl.mode == endpoints.PerClusterOff || fk.eps == nil {
		return nil
	}
	want := endpoints.PerClusterEndpoints(src)
	upd := fk.eps.DeepCopy()
	upd.Subsets = want.Subsets
	out, err := fl.hub.CoreV1().Endpoints(appNamespace).Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	fl.writes.Add(1)
	fk.eps = out
	return nil
}
