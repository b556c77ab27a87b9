package app

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// candidate is a standby's side of leader election: it takes the leader
// Lease the moment it is free, where client-go's LeaderElector notices only
// at its next poll, up to RetryPeriod later.
//
// It watches the one Lease. A Lease released (holderIdentity empty, as the
// leader leaves it once its workers stopped, see release) or deleted is
// tried at once; one whose holder stopped renewing is tried when it
// expires. Expiry is judged as client-go judges it, on this replica's
// clock: the record's leaseDurationSeconds after the replica last saw the
// Lease change. The watch sees every renewal as it happens (by its
// resourceVersion), so a warm standby's deadline is the earliest of all: a
// replica started after the leader died first saw the Lease later, and
// waits longer. The Get before taking the Lease counts a renewal too, by
// the record's exact renewTime, so a standby whose watch lags behind does
// not take a Lease its holder still renews.
//
// Why not client-go's elector alone: it has no "try now" hook, and a fresh
// elector (restarted on a watch event) dates the record from when it first
// saw it, so it takes a released Lease at once but an expired one only a
// whole LeaseDuration later. Reimplementing the elector (renewals, renew
// deadline, callbacks) would be more code to get wrong. So the
// candidate only acquires, with the steps of client-go's tryAcquireOrRenew
// (Get, then Create, or Update guarded by the resourceVersion of the Get,
// through the same resourcelock), and hands over to a LeaderElector of the
// same identity: its first attempt finds itself the holder and renews at
// once, and from there on client-go runs the lease unchanged.
type candidate struct {
	lock          resourcelock.Interface
	leaseDuration time.Duration
	// retryPeriod paces a fallback poll, as client-go's, should the watch
	// miss an event.
	retryPeriod time.Duration

	kick chan struct{} // a release or deletion was seen: try now

	mu sync.Mutex
	// What the watch or a Get last saw: the record, as resourcelock
	// marshals it (its times have only seconds), its exact renewTime, and
	// the resourceVersion, which the watch has and Get does not.
	raw        []byte
	renewed    time.Time
	rv         string
	holder     string
	duration   time.Duration // the holder's leaseDurationSeconds
	observedAt time.Time     // when either last saw a change, on our clock
}

func newCandidate(lock resourcelock.Interface, leaseDuration, retryPeriod time.Duration) *candidate {
	// Until the watch says otherwise, there is no Lease, since now.
	return &candidate{lock: lock, leaseDuration: leaseDuration, retryPeriod: retryPeriod, kick: make(chan struct{}, 1), observedAt: time.Now()}
}

// watch runs an informer on the Lease name in namespace until ctx ends. It
// must start before run; it may start long before, while caches sync, to
// date the holder's renewals.
func (c *candidate) watch(ctx context.Context, hub kubernetes.Interface, namespace, name string) cache.InformerSynced {
	f := informers.NewSharedInformerFactoryWithOptions(hub, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	inf := f.Coordination().V1().Leases().Informer()
	seen := func(obj interface{}) {
		if l, ok := obj.(*coordinationv1.Lease); ok && l.Name == name {
			c.observe(resourcelock.LeaseSpecToLeaderElectionRecord(&l.Spec), l.ResourceVersion)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, cur interface{}) { seen(cur) },
		DeleteFunc: func(interface{}) { c.observe(nil, "") },
	})
	go inf.RunWithContext(ctx)
	return inf.HasSynced
}

// observe notes the record seen in the Lease (nil: there is none) and its
// resourceVersion ("" from Get), and asks for an attempt now when nobody
// holds it.
func (c *candidate) observe(rec *resourcelock.LeaderElectionRecord, rv string) {
	var raw []byte
	var renewed time.Time
	holder, duration := "", time.Duration(0)
	if rec != nil {
		raw, _ = json.Marshal(*rec)
		renewed = rec.RenewTime.Time
		holder, duration = rec.HolderIdentity, time.Duration(rec.LeaseDurationSeconds)*time.Second
	}
	c.mu.Lock()
	changed := rec == nil || !bytes.Equal(raw, c.raw) || !renewed.Equal(c.renewed) || (rv != "" && rv != c.rv)
	if changed {
		if holder != "" && holder != c.holder && holder != c.lock.Identity() {
			klog.InfoS("Standing by; another replica leads", "leader", holder)
		}
		c.raw, c.renewed, c.holder, c.duration, c.observedAt = raw, renewed, holder, duration, time.Now()
	}
	if rv != "" {
		c.rv = rv
	}
	c.mu.Unlock()
	if changed && holder == "" {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

// untilExpiry is how long the current holder's lease still runs, as far as
// this replica has seen; 0 when nobody holds it.
func (c *candidate) untilExpiry() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holder == "" {
		return 0
	}
	return time.Until(c.observedAt.Add(c.duration))
}

// freeFor is how long nobody has held the Lease, as far as this replica
// has seen: since it was released, deleted or expired (or since the watch
// started, when there is none). Negative while it is held.
func (c *candidate) freeFor() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	free := c.observedAt
	if c.holder != "" {
		free = free.Add(c.duration)
	}
	return time.Since(free)
}

// run tries to take the Lease until it holds it (true) or ctx ends (false):
// at once, on every release or deletion the watch sees, when the holder's
// lease expires, and every retryPeriod. While warm says no, the replica's
// caches are still syncing and it takes only a Lease that has been free for
// retryPeriod: a warm standby would have taken it by then, so a fresh
// replica never wins over one, yet a lone replica need not wait for its
// slowest member to lead.
func (c *candidate) run(ctx context.Context, warm func() bool) bool {
	for {
		wait := c.retryPeriod
		if warm() {
			if c.tryAcquire(ctx) {
				return true
			}
			if d := c.untilExpiry(); d > 0 && d < wait {
				wait = d
			}
		} else {
			if c.freeFor() >= c.retryPeriod && c.tryAcquire(ctx) {
				klog.InfoS("Taking the free leader Lease with caches still syncing")
				return true
			}
			wait = 50 * time.Millisecond // check warm again soon
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-c.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// tryAcquire is the acquiring half of client-go's tryAcquireOrRenew.
func (c *candidate) tryAcquire(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, c.leaseDuration)
	defer cancel()
	rec, _, err := c.lock.Get(ctx)
	now := time.Now()
	mine := resourcelock.LeaderElectionRecord{
		HolderIdentity:       c.lock.Identity(),
		LeaseDurationSeconds: int(c.leaseDuration / time.Second),
		AcquireTime:          metav1.NewTime(now),
		RenewTime:            metav1.NewTime(now),
	}
	switch {
	case apierrors.IsNotFound(err):
		if err := c.lock.Create(ctx, mine); err != nil {
			klog.V(2).InfoS("Creating the leader Lease failed", "lock", c.lock.Describe(), "err", err)
			return false
		}
		return true
	case err != nil:
		klog.V(2).InfoS("Reading the leader Lease failed", "lock", c.lock.Describe(), "err", err)
		return false
	}
	c.observe(rec, "")
	switch {
	case rec.HolderIdentity == mine.HolderIdentity:
		return true // the elector renews it
	case rec.HolderIdentity != "" && c.untilExpiry() > 0:
		return false
	}
	mine.LeaderTransitions = rec.LeaderTransitions + 1
	if err := c.lock.Update(ctx, mine); err != nil {
		// Most likely a conflict: another replica was faster.
		klog.V(2).InfoS("Taking the leader Lease failed", "lock", c.lock.Describe(), "err", err)
		return false
	}
	return true
}
