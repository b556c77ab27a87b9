package app

import (
	"context"
	"errors"
	"fmt"
	"os"

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
			OnNewLeader: func(id string) {
				if id != identity {
					klog.InfoS("Standing by; another replica leads", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	elected := make(chan struct{})
	go func() {
		defer close(elected)
		le.Run(ctx)
	}()
	select {
	case <-elected:
		return nil // ctx ended while standing by
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

// lead runs the workers, and says so in the leader gauge while they run.
func (d *Daemon) lead(ctx context.Context) error {
	d.leader.Set(1)
	defer d.leader.Set(0)
	return d.Controller.Run(ctx)
}
