package sync

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-multierror"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// syncMemberService writes the hub objects sourced from one member service:
// its per-cluster Service and Endpoints and its MCS EndpointSlices. With the
// service gone, unexported or its member unregistered, it withdraws them.
func (c *Controller) syncMemberService(ctx context.Context, key Key) error {
	m := c.members.Member(key.Cluster)
	switch {
	case m != nil && !m.HasSynced():
		c.waitFor(key, waitMemberSynced(key.Cluster), func() bool { return c.memberSynced(key.Cluster) })
		return nil
	case m == nil && !c.members.SecretsSynced():
		// The member may yet be registered.
		c.waitFor(key, waitRegistrations(), c.members.SecretsSynced)
		return nil
	}

	var src *endpoints.Source
	if m != nil {
		svc, err := m.ServiceLister().Services(key.Namespace).Get(key.Name)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if _, ok := c.opts.Export.export(key.Cluster, m, svc); ok {
			slices, err := m.EndpointSlices(key.Namespace, key.Name)
			if err != nil {
				return err
			}
			clean, dropped := endpoints.Sanitize(endpoints.Source{Cluster: key.Cluster, Service: svc, Slices: slices})
			if dropped > 0 {
				c.metrics.InvalidEndpoints.Add(float64(dropped))
				klog.V(1).InfoS("Dropped invalid member endpoints", "key", key.String(), "count", dropped)
			}
			src = c.applyUnreachablePolicy(m, &clean)
		}
	}
	if src != nil {
		if ok, err := c.ensureNamespace(ctx, key); !ok {
			return err
		}
	}

	// MCS slices first: they are what the data plane and DNS read.
	var errs *multierror.Error
	errs = multierror.Append(errs, c.syncSlices(ctx, key, src))
	errs = multierror.Append(errs, c.syncPerCluster(ctx, key, src))
	if err := errs.ErrorOrNil(); err != nil {
		return err
	}
	c.recordEndpoints(key, countEndpoints(src))
	return nil
}

// countEndpoints counts the aggregated endpoints of a source; -1 for none.
func countEndpoints(src *endpoints.Source) int {
	if src == nil {
		return -1
	}
	n := 0
	for _, s := range src.Slices {
		if s.AddressType == discoveryv1.AddressTypeIPv4 || s.AddressType == discoveryv1.AddressTypeIPv6 {
			n += len(s.Endpoints)
		}
	}
	return n
}

// syncPerCluster writes the `<service>-<cluster>` Service and Endpoints.
func (c *Controller) syncPerCluster(ctx context.Context, key Key, src *endpoints.Source) error {
	name, _ := endpoints.PerClusterName(key.Name, key.Cluster)
	var wantSvc *corev1.Service
	var wantEps *corev1.Endpoints
	if src != nil && c.opts.PerClusterServices != endpoints.PerClusterOff {
		wantSvc = endpoints.PerClusterService(*src, c.opts.PerClusterServices)
		wantEps = endpoints.PerClusterEndpoints(*src)
	}

	liveSvc, err := c.liveService(key.Namespace, name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if liveSvc != nil && !ownedBy(liveSvc, key) {
		// Ours, but written for another source whose name collides.
		return c.conflict(resourceService, liveSvc, key)
	}
	liveEps, err := c.liveEndpoints(key.Namespace, name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if liveEps != nil && !ownedBy(liveEps, key) {
		return c.conflict(resourceEndpoints, liveEps.Meta(), key)
	}

	svcOps, epsOps := c.serviceOps(), c.endpointsOps()
	if wantSvc == nil {
		// Withdraw Endpoints first so nothing routes to a half-removed pair.
		if liveEps != nil {
			if err := remove(ctx, c, epsOps, liveEps.Meta()); err != nil {
				return err
			}
		}
		if liveSvc != nil {
			return remove(ctx, c, svcOps, liveSvc)
		}
		return nil
	}

	switch {
	case liveSvc == nil:
		if _, err := create(ctx, c, svcOps, key, wantSvc); err != nil {
			var cf *conflictError
			if errors.As(err, &cf) && liveEps != nil {
				// Someone else's Service holds the name: Endpoints of ours
				// under it would feed that Service.
				if rerr := remove(ctx, c, epsOps, liveEps.Meta()); rerr != nil {
					return rerr
				}
			}
			return err
		}
	case endpoints.ServiceNeedsRecreate(wantSvc, liveSvc):
		// ClusterIP is immutable: headless-ness changes need a new object.
		if err := remove(ctx, c, svcOps, liveSvc); err != nil {
			return err
		}
		if _, err := create(ctx, c, svcOps, key, wantSvc); err != nil {
			return err
		}
	case !endpoints.ServiceUpToDate(wantSvc, liveSvc):
		if _, err := update(ctx, c, svcOps, endpoints.MergeService(wantSvc, liveSvc)); err != nil {
			return err
		}
	}

	switch {
	case liveEps == nil:
		_, err = create(ctx, c, epsOps, key, wantEps)
	case !endpoints.EndpointsUpToDate(wantEps, liveEps):
		_, err = update(ctx, c, epsOps, endpoints.MergeEndpoints(wantEps, liveEps))
	}
	return err
}

// syncSlices writes the MCS EndpointSlices of one member service.
func (c *Controller) syncSlices(ctx context.Context, key Key, src *endpoints.Source) error {
	existing, err := c.hubSlices(key)
	if err != nil {
		return err
	}
	var plan endpoints.SlicePlan
	if src != nil {
		plan = endpoints.PlanSlices(*src, existing)
	} else {
		plan = endpoints.PlanSlicesDelete(key.Namespace, key.Name, key.Cluster, existing)
	}
	if plan.Empty() {
		return nil
	}
	klog.V(4).InfoS("Writing slices", "key", key.String(), "create", len(plan.Create), "update", len(plan.Update), "delete", len(plan.Delete))
	// Fixed order: creates and updates before deletes, so endpoints moving
	// between slices are never missing from the hub.
	ops := c.sliceOps()
	var errs *multierror.Error
	for _, s := range plan.Create {
		_, err := create(ctx, c, ops, key, s)
		errs = multierror.Append(errs, err)
	}
	for _, s := range plan.Update {
		_, err := update(ctx, c, ops, s)
		errs = multierror.Append(errs, err)
	}
	for _, s := range plan.Delete {
		errs = multierror.Append(errs, remove(ctx, c, ops, s))
	}
	if err := errs.ErrorOrNil(); err != nil {
		return err
	}
	if src != nil {
		c.observePropagation(src.Slices)
	}
	return nil
}

// observePropagation records how long the newest member change took to reach
// the hub. Trigger times from before the daemon started (a cold start
// catching up) are not observed: they measure downtime, not propagation.
func (c *Controller) observePropagation(slices []*discoveryv1.EndpointSlice) {
	var newest time.Time
	for _, s := range slices {
		v, ok := s.Annotations[corev1.EndpointsLastChangeTriggerTime]
		if !ok {
			continue
		}
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil && t.After(newest) {
			newest = t
		}
	}
	if newest.After(c.startTime) {
		c.metrics.Propagation.Observe(time.Since(newest).Seconds())
	}
}

// hubSlices returns our hub slices sourced from key, as cached or, where
// the cache has not seen our last write yet, as written; read-only.
func (c *Controller) hubSlices(key Key) ([]*endpoints.SliceDigest, error) {
	source := sourceKey(key)
	objs, err := c.sliceInf.GetIndexer().ByIndex(bySource, source)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*endpoints.SliceDigest, len(objs))
	for _, o := range objs {
		if s, ok := o.(*endpoints.SliceDigest); ok {
			byName[s.Name] = s
		}
	}
	for name, o := range c.written.sourceSlices(source) {
		if o == nil {
			delete(byName, name)
		} else {
			byName[name] = o.(*endpoints.SliceDigest)
		}
	}
	out := make([]*endpoints.SliceDigest, 0, len(byName))
	for _, s := range byName {
		out = append(out, s)
	}
	return out, nil
}

// ensureNamespace reports whether the hub has the key's namespace, creating
// it when --create-namespaces is set. A missing namespace is not an error to
// retry: the key waits for the namespace to appear.
func (c *Controller) ensureNamespace(ctx context.Context, key Key) (bool, error) {
	exists := func() bool { _, err := c.namespaces.Get(key.Namespace); return err == nil }
	if exists() {
		return true, nil
	}
	ref := &corev1.ObjectReference{Kind: "Namespace", APIVersion: "v1", Name: key.Namespace}
	if !c.opts.CreateNamespaces {
		c.metrics.SkippedNamespace.Inc()
		c.recorder.Eventf(ref, corev1.EventTypeWarning, "NamespaceMissing",
			"hub has no namespace %q for %s; skipped (start the daemon with --create-namespaces to create it)", key.Namespace, key)
		klog.V(2).InfoS("Hub namespace missing, skipping", "namespace", key.Namespace, "key", key.String())
		c.waitFor(key, waitNamespace(key.Namespace), exists)
		return false, nil
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: key.Namespace}}
	_, err := c.hub.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{FieldManager: fieldManager})
	c.countWrite(resourceNamespace, verbCreate, err)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return false, err
	}
	return true, nil
}

// applyUnreachablePolicy returns src as the hub should show it while its
// member is unreachable: unchanged (the default: last-known endpoints), with
// every endpoint not ready after the grace period, or nil (withdrawn) after
// the withdraw period.
func (c *Controller) applyUnreachablePolicy(m Member, src *endpoints.Source) *endpoints.Source {
	since, down := m.UnreachableSince()
	if !down {
		return src
	}
	grace, withdraw := m.UnreachablePolicy(c.opts.UnreachableGrace, c.opts.UnreachableWithdraw)
	age := time.Since(since)
	switch {
	case withdraw > 0 && age >= withdraw:
		return nil
	case grace > 0 && age >= grace:
		marked := endpoints.MarkNotReady(*src)
		return &marked
	}
	return src
}
