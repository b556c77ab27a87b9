package sync

import (
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/shard"
)

// checkReports is the oracle at quiescence on what each replica keeps and
// reports per member: the members of its store (export ledger, refusal
// counts, invalid-export notes) and every series with a cluster label its
// controller's collector gathers. Each member named must be registered
// and, in a sharded seed, held by that replica at the hub; the member ""
// of the store (export conflicts) belongs to the replica that merges.
func (w *world) checkReports() error {
	replicas := w.replicaList()
	if w.shard != nil {
		replicas = w.running()
	}
	for _, r := range replicas {
		for _, c := range storedMembers(r.ctrl.state) {
			if err := w.mayReport(r, c); err != nil {
				return fmt.Errorf("oracle: %s keeps state of member %q: %v", r.name, c, err)
			}
		}
		reg := prometheus.NewPedanticRegistry()
		if err := reg.Register(r.ctrl); err != nil {
			return err
		}
		families, err := reg.Gather()
		if err != nil {
			return err
		}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() != "cluster" {
						continue
					}
					if err := w.mayReport(r, l.GetValue()); err != nil {
						return fmt.Errorf("oracle: %s reports %s{cluster=%q}: %v", r.name, f.GetName(), l.GetValue(), err)
					}
				}
			}
		}
	}
	return nil
}

// storedMembers are the members r's store holds a part of, read under its
// lock.
func storedMembers(s *memberStates) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.members))
	for c := range s.members {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// mayReport: r may keep and report member c (""; the merged state).
func (w *world) mayReport(r *replica, c string) error {
	if c == "" {
		if w.shard == nil || w.shard.lead == r {
			return nil
		}
		return fmt.Errorf("it does not merge (%s does)", nameOf(w.shard.lead))
	}
	if !w.registered(c) {
		return fmt.Errorf("the member is not registered")
	}
	if w.shard == nil {
		return nil
	}
	holder := ""
	if l := w.shard.leases[shard.FenceName(c)]; l != nil {
		holder = ptr.Deref(l.Spec.HolderIdentity, "")
	}
	if holder != r.name {
		return fmt.Errorf("the hub's fence is held by %q", holder)
	}
	return nil
}
