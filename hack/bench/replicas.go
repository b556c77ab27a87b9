package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/shard"
)

// replicaResults are the figures of the sharded phase (-replicas N): N
// daemon processes sharing the members, against the same hub after it was
// emptied. The phase runs -runs times: ColdSeconds and ServedAgainSeconds
// are the medians of ColdRuns and ServedAgainRuns, the other figures the
// last run's.
type replicaResults struct {
	Replicas    int     `json:"replicas"`
	ColdSeconds float64 `json:"coldSeconds"`
	ColdRuns    spread  `json:"coldSecondsRuns"`
	// RSSBytes is each replica's resident memory at steady state.
	RSSBytes []float64 `json:"rssBytes"`
	// OwnedMembers is how many members each replica held then.
	OwnedMembers []float64 `json:"ownedMembers"`
	// HandoverWrites are the hub writes (all replicas, Leases excepted)
	// and objects changed while one replica stopped gracefully and its
	// members moved, on a converged hub.
	HandoverWrites         int64 `json:"handoverWrites"`
	HandoverObjectsChanged int   `json:"handoverObjectsChanged"`
	// KilledMembers were held by the replica SIGKILLed; ServedAgainSeconds
	// is from the kill until a change made at the kill in each of them was
	// in the hub (-1: some never were).
	KilledMembers      int     `json:"killedMembers"`
	ServedAgainSeconds float64 `json:"servedAgainSeconds"`
	ServedAgainRuns    spread  `json:"servedAgainSecondsRuns"`
	LeaseSeconds       float64 `json:"leaseSeconds"`
}

// runReplicaPhases runs the sharded phase -runs times, and keeps the
// medians of its timed figures.
func runReplicaPhases(ctx context.Context, c *config, r *results, f *fleet, hub *testenv.Cluster, tmp string, ch *changer) error {
	var cold, served []float64
	never := false
	for i := range c.runs {
		logf("replicas: run %d of %d", i+1, c.runs)
		r.Replicas = replicaResults{} // each run's own RSS, owners and counts
		if err := runReplicas(ctx, c, r, f, hub, filepath.Join(tmp, "replicas-run-"+strconv.Itoa(i+1)), ch); err != nil {
			return err
		}
		cold = append(cold, r.Replicas.ColdSeconds)
		if r.Replicas.Replicas >= 2 {
			served = append(served, r.Replicas.ServedAgainSeconds)
			never = never || r.Replicas.ServedAgainSeconds < 0
		}
	}
	rr := &r.Replicas
	rr.ColdRuns, rr.ColdSeconds = spreadOf(cold), median(cold)
	if len(served) > 0 {
		rr.ServedAgainRuns, rr.ServedAgainSeconds = spreadOf(served), median(served)
		if never {
			rr.ServedAgainSeconds = -1
		}
	}
	return nil
}

// replicaLease is the peer and leader Lease duration of the sharded phase,
// the daemon's default.
const replicaLease = 15 * time.Second

// runReplicas empties the hub with `endpoint-aggregator cleanup`, starts c.replicas
// daemon processes sharing the members, and measures their cold start, their
// memory, a graceful handover and a SIGKILL.
func runReplicas(ctx context.Context, c *config, r *results, f *fleet, hub *testenv.Cluster, tmp string, ch *changer) (retErr error) {
	logf("replicas: emptying the hub for %d sharing replicas", c.replicas)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, c.binary, "cleanup", "--kubeconfig", hub.KubeconfigPath, "--hub-context", "hub",
		"-n", daemonNamespace, "--force", "--leader-election-id", "endpoint-aggregator").CombinedOutput()
	if err != nil {
		return fmt.Errorf("cleanup: %v\n%s", err, out)
	}
	tr, hubMCS, err := startTracker(ctx, "replicas", f, c, hub)
	if err != nil {
		return err
	}
	defer tr.close()

	var procs []*daemonProc
	defer func() {
		for _, d := range procs {
			if err := d.stop(stopTimeout); err != nil {
				logf("%v", err)
			}
		}
	}()
	startOne := func(i int) (*daemonProc, error) {
		addr, err := freeLoopbackAddr()
		if err != nil {
			return nil, err
		}
		args := daemonArgs(c, hub.KubeconfigPath, addr)
		args = slices.DeleteFunc(args, func(a string) bool { return a == "--leader-elect=false" })
		args = append(args, "--leader-elect=true", "--shard-members=true")
		return startDaemon(c.binary, args, c.daemonEnv, addr, filepath.Join(tmp, "replica-"+strconv.Itoa(i)+".log"))
	}
	start := time.Now()
	for i := range c.replicas {
		d, err := startOne(i)
		if err != nil {
			return err
		}
		procs = append(procs, d)
	}
	rr := &r.Replicas
	rr.Replicas, rr.LeaseSeconds = c.replicas, replicaLease.Seconds()
	at, err := tr.waitConverged(ctx, convergeLimit, "replicas cold")
	if err != nil {
		return err
	}
	rr.ColdSeconds = at.Sub(start).Seconds()
	logf("replicas: %d replicas converged in %.2fs", c.replicas, rr.ColdSeconds)
	for _, d := range procs {
		if _, err := d.waitSettled(ctx, settleQuiet, settleLimit); err != nil {
			return err
		}
	}
	for _, d := range procs {
		mem, err := sampleMemory(ctx, d, 5, time.Second)
		if err != nil {
			return err
		}
		m, err := d.scrape(ctx)
		if err != nil {
			return err
		}
		rr.RSSBytes = append(rr.RSSBytes, mem.RSSBytes)
		rr.OwnedMembers = append(rr.OwnedMembers, m.value("endpoint_aggregator_owned_members"))
	}
	logf("replicas: RSS %v MiB, members owned %v", mib(rr.RSSBytes), rr.OwnedMembers)
	if c.replicas < 2 {
		return nil
	}

	// A graceful handover on a converged hub: the last replica stops.
	before, err := snapshotRVs(ctx, hub.Client, hubMCS)
	if err != nil {
		return err
	}
	base := make([]metrics, len(procs))
	for i, d := range procs {
		if base[i], err = d.scrape(ctx); err != nil {
			return err
		}
	}
	last := procs[len(procs)-1]
	if err := last.stop(stopTimeout); err != nil {
		return err
	}
	procs = procs[:len(procs)-1]
	base = base[:len(procs)]
	if err := waitOwned(ctx, hub, f, procs); err != nil {
		return err
	}
	for i, d := range procs {
		m, err := d.waitSettled(ctx, settleQuiet, settleLimit)
		if err != nil {
			return err
		}
		rr.HandoverWrites += int64(m.hubWrites() - base[i].hubWrites())
	}
	after, err := snapshotRVs(ctx, hub.Client, hubMCS)
	if err != nil {
		return err
	}
	rr.HandoverObjectsChanged = diffRVs(before, after)
	logf("replicas: graceful handover wrote %d times, %d objects changed", rr.HandoverWrites, rr.HandoverObjectsChanged)

	// SIGKILL the replica that holds the most members, and change one
	// endpoint of each of them at once.
	victim, held := -1, []int(nil)
	for i, d := range procs {
		id, err := identity(ctx, d)
		if err != nil {
			return err
		}
		if h, err := heldBy(ctx, hub, f, id); err != nil {
			return err
		} else if len(h) > len(held) {
			victim, held = i, h
		}
	}
	if victim < 0 {
		return errors.New("replicas: no replica holds a member")
	}
	killed := time.Now()
	_ = procs[victim].cmd.Process.Signal(syscall.SIGKILL)
	<-procs[victim].done
	procs = slices.Delete(procs, victim, victim+1)
	var changes []*pending
	for _, m := range held {
		p, err := ch.change(ctx, tr, f.slices[m][0][0], ch.intn(memberSliceSize))
		if err != nil {
			return err
		}
		changes = append(changes, p)
	}
	rr.KilledMembers = len(held)
	missing := waitAll(ctx, changes, convergeLimit)
	var seen time.Time
	for _, p := range changes {
		if _, ok := p.latency(); ok && p.seen.After(seen) {
			seen = p.seen
		}
	}
	rr.ServedAgainSeconds = seen.Sub(killed).Seconds()
	if missing > 0 {
		rr.ServedAgainSeconds = -1
	}
	logf("replicas: SIGKILL of a replica holding %d members: served again after %.1fs (%d changes missing)", len(held), rr.ServedAgainSeconds, missing)
	return nil
}

// identity reads a replica's identity from its metrics.
func identity(ctx context.Context, d *daemonProc) (string, error) {
	m, err := d.scrape(ctx)
	if err != nil {
		return "", err
	}
	for _, s := range m["endpoint_aggregator_replica_info"] {
		if id := s.labels["identity"]; id != "" {
			return id, nil
		}
	}
	return "", errors.New("replica exposes no endpoint_aggregator_replica_info")
}

// heldBy returns the members (fleet indexes) whose fence names identity.
func heldBy(ctx context.Context, hub *testenv.Cluster, f *fleet, identity string) ([]int, error) {
	list, err := hub.Client.CoordinationV1().Leases(daemonNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{shard.LabelRole: shard.RoleFence}.String()})
	if err != nil {
		return nil, err
	}
	holder := map[string]string{}
	for _, l := range list.Items {
		if l.Spec.HolderIdentity != nil {
			holder[l.Labels[shard.LabelFenceCluster]] = *l.Spec.HolderIdentity
		}
	}
	var out []int
	for i, name := range f.members {
		if holder[name] == identity {
			out = append(out, i)
		}
	}
	return out, nil
}

// waitOwned waits until every member's fence is held by one of procs.
func waitOwned(ctx context.Context, hub *testenv.Cluster, f *fleet, procs []*daemonProc) error {
	ids := map[string]bool{}
	for _, d := range procs {
		id, err := identity(ctx, d)
		if err != nil {
			return err
		}
		ids[id] = true
	}
	deadline := time.Now().Add(convergeLimit)
	for {
		n := 0
		for id := range ids {
			h, err := heldBy(ctx, hub, f, id)
			if err != nil {
				return err
			}
			n += len(h)
		}
		if n == len(f.members) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replicas: %d of %d members held by the running replicas after %s", n, len(f.members), convergeLimit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func mib(v []float64) string {
	parts := make([]string, len(v))
	for i, b := range v {
		parts[i] = fmt.Sprintf("%.0f", b/(1<<20))
	}
	return "[" + strings.Join(parts, " ") + "]"
}
