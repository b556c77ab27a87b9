package app

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/shard"
)

// errLostLeadership ends the daemon: a replica that lost its lease exits, as
// Kubernetes' own controllers do, and restarts as a standby with fresh state.
var errLostLeadership = errors.New("lost leader election lease")

// runLeading runs the controller's workers while this replica holds the
// leader Lease. Caches are warm before then (standbys run the informers), so
// a takeover against a converged hub writes nothing.
//
// A replica contends only once its caches are warm (see warm), or for a
// Lease nobody took for a RetryPeriod: a fresh replacement pod must not win
// the Lease over a standby that is ready to lead. While it stands by, a
// candidate watches the Lease and takes it the moment it is released or
// expires; then client-go's elector renews it.
//
// Leadership ends in one order: the workers stop and Controller.Run returns
// (it waits for them, so no write of ours is in flight), the elector stops
// renewing, and only then is the Lease released. client-go's own
// ReleaseOnCancel has it the other way round: renew releases the Lease
// before Run cancels the leading context, so a watching standby would start
// its workers while ours still write. It stays off.
//
// When the hub stops answering, the workers stop once the renew deadline
// has passed since the last renewal that succeeded was sent (renewalClock),
// on this replica's clock. A standby takes an unreleased Lease only a lease
// duration after it saw that renewal arrive, later by LeaseDuration -
// RenewDeadline, the time the workers have to stop. client-go's elector
// gives up later than that, a retry period after the last renewal's answer
// plus the renew deadline, which can be past the standby's takeover.
func (d *Daemon) runLeading(ctx context.Context, hub kubernetes.Interface, recorder record.EventRecorder) error {
	if !d.opts.LeaderElect {
		return d.lead(ctx)
	}
	identity := d.identity
	rl, err := resourcelock.New(resourcelock.LeasesResourceLock, d.opts.Namespace, d.opts.LeaderElectionID,
		hub.CoreV1(), hub.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: identity, EventRecorder: recorder})
	if err != nil {
		return fmt.Errorf("leader election lock: %w", err)
	}
	lock := &renewalClock{Interface: rl}
	leading := make(chan context.Context, 1)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: d.opts.LeaseDuration,
		RenewDeadline: d.opts.RenewDeadline,
		RetryPeriod:   d.opts.RetryPeriod,
		// Released by release, after the workers stopped.
		ReleaseOnCancel: false,
		Name:            d.opts.LeaderElectionID,
		Callbacks: leaderelection.LeaderCallbacks{
			// The elector cancels lctx when it stops renewing.
			OnStartedLeading: func(lctx context.Context) { leading <- lctx },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}

	cand := newCandidate(lock, d.opts.LeaseDuration, d.opts.RetryPeriod)
	wctx, stopWatch := context.WithCancel(ctx)
	cand.watch(wctx, hub, d.opts.Namespace, d.opts.LeaderElectionID)
	acquired := cand.run(ctx, d.warm())
	stopWatch()
	if !acquired {
		return nil // ctx ended while standing by
	}

	ectx, stopElector := context.WithCancel(ctx)
	defer stopElector()
	elected := make(chan struct{})
	go func() {
		defer close(elected)
		le.Run(ectx)
	}()
	var lctx context.Context
	select {
	case <-elected:
		// ctx ended before the elector's first renewal; no worker ran.
		release(lock, d.opts.RenewDeadline)
		return nil
	case lctx = <-leading:
	}
	klog.InfoS("Became leader; starting workers", "identity", identity)
	workers, stopWorkers := context.WithCancel(lctx)
	go lock.stopAtDeadline(workers, shard.RenewBudget(d.opts.LeaseDuration, d.opts.RenewDeadline), stopWorkers)
	d.leaderLock.Store(lock)
	err = d.lead(workers)
	d.leaderLock.Store(nil)
	stopWorkers()
	stopElector()
	<-elected
	release(lock, d.opts.RenewDeadline)
	klog.InfoS("Stopped leading", "identity", identity)
	if err != nil {
		return err
	}
	if ctx.Err() == nil {
		return errLostLeadership
	}
	return nil
}

// renewalClock is the leader's lock, noting when the last write of the
// Lease that names this replica and succeeded was sent: the hub applied it
// later, and standbys saw it later still, so a deadline counted from then
// passes before theirs.
type renewalClock struct {
	resourcelock.Interface

	mu      sync.Mutex
	renewed time.Time
}

func (l *renewalClock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	err := l.Interface.Create(ctx, r)
	l.note(sent, r, err)
	return err
}

func (l *renewalClock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	err := l.Interface.Update(ctx, r)
	l.note(sent, r, err)
	return err
}

func (l *renewalClock) note(sent time.Time, r resourcelock.LeaderElectionRecord, err error) {
	if err != nil || r.HolderIdentity != l.Identity() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if sent.After(l.renewed) {
		l.renewed = sent
	}
}

func (l *renewalClock) lastRenewal() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewed
}

// stopAtDeadline calls stop once budget has passed since the last renewal
// was sent, unless ctx ends first.
func (l *renewalClock) stopAtDeadline(ctx context.Context, budget time.Duration, stop func()) {
	for {
		last := l.lastRenewal()
		left := time.Until(last.Add(budget))
		if left <= 0 {
			klog.InfoS("Leader Lease not renewed within the renew deadline; stopping workers",
				"lock", l.Describe(), "sinceLastRenewal", time.Since(last).Round(time.Millisecond), "renewDeadline", budget)
			stop()
			return
		}
		t := time.NewTimer(left)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// release frees the Lease for a standby to take at once, as client-go's
// release does, but only while the Lease still names this replica: after a
// renewal failed, another one may have taken it, and client-go's release,
// which trusts what it last wrote, would free the new leader's Lease. The
// Update is guarded by the resourceVersion of the Get. Call it only once
// the workers and the elector have stopped.
func release(lock resourcelock.Interface, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		rec, _, err := lock.Get(ctx)
		switch {
		case apierrors.IsNotFound(err):
			return
		case err != nil:
			klog.InfoS("Could not release the leader Lease; it expires on its own", "lock", lock.Describe(), "err", err)
			return
		case rec.HolderIdentity != lock.Identity():
			if rec.HolderIdentity != "" {
				klog.InfoS("Leaving the leader Lease to the replica that took it", "lock", lock.Describe(), "leader", rec.HolderIdentity)
			}
			return
		}
		now := metav1.NewTime(time.Now())
		err = lock.Update(ctx, resourcelock.LeaderElectionRecord{
			LeaderTransitions:    rec.LeaderTransitions,
			LeaseDurationSeconds: 1,
			RenewTime:            now,
			AcquireTime:          now,
		})
		switch {
		case err == nil:
			klog.InfoS("Released the leader Lease", "lock", lock.Describe())
			return
		case !apierrors.IsConflict(err):
			klog.InfoS("Could not release the leader Lease; it expires on its own", "lock", lock.Describe(), "err", err)
			return
		}
		// Conflict: a renewal of ours that we gave up on landed. Read again.
	}
}

// warm returns whether the replica is ready to lead: hub caches synced and
// every member synced or missed its sync timeout (Ready). A dead member
// holds no replica back longer than --member-sync-timeout, as Ready counts
// it then; should readiness still not come (registrations changing all the
// time), the replica counts as warm one sync timeout after it read the
// registrations, so that some replica always leads.
func (d *Daemon) warm() func() bool {
	var registered time.Time
	return func() bool {
		if d.Coordinator != nil {
			// The leader merges and assigns, from hub records: it needs
			// the hub's caches, not the members'.
			return d.Controller.HubSynced() && d.Coordinator.HasSynced() && d.Registry.SecretsSynced()
		}
		if d.Ready() {
			return true
		}
		if registered.IsZero() && d.Registry.SecretsSynced() {
			registered = time.Now()
		}
		return !registered.IsZero() && time.Since(registered) > d.opts.MemberSyncTimeout+time.Second
	}
}

// lead runs the workers, and says so in the leader gauge while they run.
func (d *Daemon) lead(ctx context.Context) error {
	d.leader.Set(1)
	d.leading.Store(true)
	defer d.leader.Set(0)
	defer d.leading.Store(false)
	if d.Coordinator != nil {
		return d.merge(ctx)
	}
	if d.opts.LeaderElect {
		// The member Events this replica held back as a standby.
		d.Registry.ReportState()
	}
	return d.Controller.Run(ctx)
}
