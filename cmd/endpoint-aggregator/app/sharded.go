package app

import (
	"context"
	"errors"
	stdsync "sync"
	"time"

	"k8s.io/klog/v2"

	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/shard"
)

// runSharded runs a replica that shares the members with the others
// (--shard-members): every replica runs workers for the members whose
// fences it holds; the one holding the leader Lease also assigns the
// members and merges. When ctx ends it hands its members over first
// (Coordinator.Drain, within --shutdown-timeout), still serving them
// meanwhile, then stops, and a leader releases its Lease last.
func (d *Daemon) runSharded(ctx context.Context) error {
	work, stopWork := context.WithCancel(context.Background())
	defer stopWork()
	var wg stdsync.WaitGroup
	errc := make(chan error, 4)
	if err := d.serveHTTP(work, &wg, errc); err != nil {
		return err
	}
	d.readHubIdentity(work)
	wg.Go(func() { d.publishConfig(work) })
	wg.Go(func() { d.watchHubIdentity(work) })
	wg.Go(func() { d.Registry.Run(work) })
	d.Controller.StartInformers(work)
	wg.Go(func() { d.Coordinator.Run(work) })
	wg.Go(func() {
		if err := d.Controller.Run(work); err != nil {
			errc <- err
		}
	})
	wg.Go(func() {
		// Losing the leader Lease ends the merging, not the replica: it
		// goes on with its members and contends again.
		for work.Err() == nil {
			if err := d.runLeading(work, d.hub, d.recorder); err != nil && !errors.Is(err, errLostLeadership) {
				errc <- err
				return
			}
		}
	})

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	klog.InfoS("Handing this replica's members over before stopping", "timeout", d.opts.ShutdownTimeout)
	dctx, cancel := context.WithTimeout(context.Background(), d.opts.ShutdownTimeout)
	d.Coordinator.Drain(dctx)
	cancel()
	stopWork()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d.opts.ShutdownTimeout):
		klog.InfoS("Shutdown timed out; exiting with syncs in flight", "timeout", d.opts.ShutdownTimeout)
	}
	return err
}

// merge runs while the replica holds the leader Lease, with sharding: the
// merged objects are written by this replica while ctx lasts (and its
// Lease's deadline holds, see merging). It returns once no merge is in
// flight, so that the Lease is released after the last merged write.
func (d *Daemon) merge(ctx context.Context) error {
	klog.InfoS("Merging and assigning members")
	d.Controller.OwnershipChanged("")
	d.Coordinator.Kick()
	<-ctx.Done()
	d.leading.Store(false)
	deadline := time.Now().Add(d.opts.RenewDeadline)
	for d.Controller.Busy("") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// merging reports whether this replica writes the merged objects now, and
// until when: while it leads, and its last leader Lease renewal is within
// the renew budget.
func (d *Daemon) merging() (bool, time.Time) {
	lock := d.leaderLock.Load()
	if !d.leading.Load() || lock == nil {
		return false, time.Time{}
	}
	until := lock.lastRenewal().Add(shard.RenewBudget(d.opts.LeaseDuration, d.opts.RenewDeadline))
	return time.Now().Before(until), until
}

// shardView is the controller's view of sharding.
type shardView struct{ d *Daemon }

func (v *shardView) Merging() (bool, time.Time) { return v.d.merging() }
func (v *shardView) Free(cluster string) bool   { return v.d.Coordinator.Free(cluster) }

// kickingHandler is the controller, as the registry's handler, also telling
// the coordinator when a member's connection changed: a member that synced
// may be taken over.
type kickingHandler struct {
	*easync.Controller
	kick func()
}

func (h kickingHandler) ClusterSynced(cluster string) {
	h.Controller.ClusterSynced(cluster)
	h.kick()
}

func (h kickingHandler) ClusterSyncTimedOut(cluster string) {
	h.Controller.ClusterSyncTimedOut(cluster)
	h.kick()
}

func (h kickingHandler) ClusterRemoved(cluster string) {
	h.Controller.ClusterRemoved(cluster)
	h.kick()
}

func (h kickingHandler) ClusterHealthChanged(cluster string, healthy bool) {
	h.Controller.ClusterHealthChanged(cluster, healthy)
	h.kick()
}

// Identity is this replica's identity, as its leader and fence Leases name
// it.
func (d *Daemon) Identity() string { return d.identity }
