package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/shard"
)

// sharded runs a replica that shares the members, on short lease timings.
func sharded(o *app.Options) {
	o.LeaderElect, o.ShardMembers = true, true
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 4*time.Second, 3*time.Second, 500*time.Millisecond
	o.ShutdownTimeout = 20 * time.Second
}

// owners returns, for each member, the replicas that may write it now, and
// checks that the fence Lease on the hub names the one that does.
func owners(t *testing.T, e *env, members []string, replicas []*daemon) (map[string][]int, error) {
	t.Helper()
	out := map[string][]int{}
	for _, m := range members {
		l, err := e.hub.Client.CoordinationV1().Leases(daemonNamespace).Get(context.Background(), shard.FenceName(m), metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("fence of %s: %w", m, err)
		}
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		for i, r := range replicas {
			if r.cancel == nil {
				continue // stopped
			}
			if ok, _ := r.Coordinator.Owns(m); ok {
				out[m] = append(out[m], i)
				if holder != r.Identity() {
					return nil, fmt.Errorf("replica %d writes %s, but its fence names %q", i, m, holder)
				}
			}
		}
	}
	return out, nil
}

// TestShardedReplicasShareMembersAndHandOverWithoutWriting runs three
// replicas that share two members. Each member is written by exactly one
// replica, the holder of its fence, and only that replica connects to it;
// the merged objects are the leader's. A replica that stops hands its
// member over: the new owner takes the fence after it synced, and its first
// diff of a converged hub writes nothing. Then it follows changes.
func TestShardedReplicasShareMembersAndHandOverWithoutWriting(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	exportService(t, e.east.Client, "cart")
	exportService(t, e.west.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-1", 1, 3, true))
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-1", 2, 2, true))

	replicas := []*daemon{e.startDaemon(t, sharded), e.startDaemon(t, sharded), e.startDaemon(t, sharded)}
	waitFor(t, e, "cart", map[string]int{"east": 3, "west": 2}, map[string]int{"east": 3, "west": 2})
	members := []string{"east", "west"}
	var own map[string][]int
	eventually(t, waitTimeout, func() error {
		var err error
		if own, err = owners(t, e, members, replicas); err != nil {
			return err
		}
		for _, m := range members {
			if len(own[m]) != 1 {
				return fmt.Errorf("%s is written by replicas %v, want exactly one", m, own[m])
			}
		}
		return nil
	})
	for _, r := range replicas {
		r.waitSettled(t)
	}
	// status names each member's owner.
	kubeconfig := cliKubeconfig(t, e.hub)
	eventually(t, waitTimeout, func() error {
		stdout, stderr, err := runCLI(context.Background(), "status", "--hub-context", "hub", "-n", daemonNamespace, "-o", "json", "--kubeconfig", kubeconfig)
		if err != nil {
			return fmt.Errorf("status: %v\n%s", err, stderr)
		}
		var report struct {
			Members []struct {
				Name, Owner string
			}
		}
		if err := json.Unmarshal([]byte(stdout), &report); err != nil {
			return err
		}
		for _, m := range report.Members {
			if want := replicas[own[m.Name][0]].Identity(); m.Owner != want {
				return fmt.Errorf("status says %s is owned by %q, want %q", m.Name, m.Owner, want)
			}
		}
		if len(report.Members) != len(members) {
			return fmt.Errorf("status lists %d members, want %d", len(report.Members), len(members))
		}
		return nil
	})
	// Only an owner connects to its member.
	for _, m := range members {
		for i, r := range replicas {
			if c := r.Registry.Get(m); (c != nil) != (i == own[m][0]) {
				t.Errorf("replica %d has a connection to %s: %t; its owner is replica %d", i, m, c != nil, own[m][0])
			}
		}
	}

	before := e.ourObjects(t)
	writes := make([]int64, len(replicas))
	for i, r := range replicas {
		writes[i] = r.writes.n.Load()
	}
	gone := own["east"][0]
	replicas[gone].stop()
	eventually(t, waitTimeout, func() error {
		var err error
		if own, err = owners(t, e, members, replicas); err != nil {
			return err
		}
		if len(own["east"]) != 1 || own["east"][0] == gone {
			return fmt.Errorf("east is written by replicas %v after replica %d stopped", own["east"], gone)
		}
		return nil
	})
	for i, r := range replicas {
		if i != gone {
			r.waitSettled(t)
		}
	}
	for i, r := range replicas {
		if n := r.writes.n.Load() - writes[i]; i != gone && n != 0 {
			t.Errorf("replica %d wrote %d times across a handover of a converged hub, want 0", i, n)
		}
	}
	if after := e.ourObjects(t); !reflect.DeepEqual(before, after) {
		t.Errorf("hub objects changed across the handover:\nbefore %v\n after %v", before, after)
	}
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-1", 1, 5, true))
	waitFor(t, e, "cart", map[string]int{"east": 5, "west": 2}, map[string]int{"east": 5, "west": 2})
}
