package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// errLostLeadership ends the daemon: a replica that lost its lease exits, as
// Kubernetes' own controllers do, and restarts as a standby with fresh state.
var errLostLeadership = errors.New("lost leader election lease")

// runLeading runs the controller's workers while this replica holds the
// leader Lease. Caches are warm before then (standbys run the informers), so
// a takeover against a converged hub writes nothing. Losing the lease cancels
// the workers' context at once, which aborts their in-flight requests.
//
// A replica contends only once its caches are warm (see warm), or for a
// Lease nobody took for a RetryPeriod: a fresh replacement pod must not win
// the Lease over a standby that is ready to lead. While it stands by, a
// candidate watches the Lease and takes it the moment it is released or
// expires; then client-go's elector renews it.
func (d *Daemon) runLeading(ctx context.Context, hub kubernetes.Interface, recorder record.EventRecorder) error {
	if !d.opts.LeaderElect {
		return d.lead(ctx)
	}
	host, _ := os.Hostname()
	identity := host + "_" + string(uuid.NewUUID())
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, d.opts.Namespace, d.opts.LeaderElectionID,
		hub.CoreV1(), hub.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: identity, EventRecorder: recorder})
	if err != nil {
		return fmt.Errorf("leader election lock: %w", err)
	}
	leading := make(chan context.Context, 1)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   d.opts.LeaseDuration,
		RenewDeadline:   d.opts.RenewDeadline,
		RetryPeriod:     d.opts.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            d.opts.LeaderElectionID,
		Callbacks: leaderelection.LeaderCallbacks{
			// The elector cancels lctx when it stops renewing.
			OnStartedLeading: func(lctx context.Context) { leading <- lctx },
			OnStoppedLeading: func() { klog.InfoS("Stopped leading", "identity", identity) },
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

	elected := make(chan struct{})
	go func() {
		defer close(elected)
		le.Run(ctx)
	}()
	select {
	case <-elected:
		return nil // ctx ended before the elector's first renewal
	case lctx := <-leading:
		klog.InfoS("Became leader; starting workers", "identity", identity)
		err := d.lead(lctx)
		<-elected
		if err != nil {
			return err
		}
		if ctx.Err() == nil {
			return errLostLeadership
		}
		return nil
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
	if d.opts.LeaderElect {
		// The member Events this replica held back as a standby.
		d.Registry.ReportState()
	}
	return d.Controller.Run(ctx)
}
