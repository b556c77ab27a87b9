package sync

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

// syncClusterSet writes the objects merged across members for one service:
// the ServiceImport and its derived Service. It merges the export records
// the hub holds on each registered member's slices (readExports), never a
// member's caches: a member that is unreachable or has not synced since the
// daemon started counts as the hub last recorded it, and the keys of
// different members may be synced by different workers, or replicas.
func (c *Controller) syncClusterSet(ctx context.Context, key Key, out *outcome) error {
	if !c.members.SecretsSynced() {
		out.waitFor(waitRegistrations(), c.members.SecretsSynced)
		return nil
	}
	ctx, done, merging := c.fenced(ctx, key, lifecycle.State{}, out)
	defer done()
	if !merging {
		return nil // the leader merges
	}
	if !c.sourcesSwept(key) {
		// A sweep is recording this service's exports member by member:
		// merge once, after the last of them.
		out.waitFor(waitSourcesSwept(key), func() bool { return c.sourcesSwept(key) })
		return nil
	}
	exports, unreadable, err := c.read.readExports(key, c.registered())
	if err != nil {
		return err
	}
	// An unreadable record is rewritten by its member's sync, queued here
	// (or its holder's, on another replica); each rewrite queues this key.
	// The merge waits for the members that have a connection (after an
	// upgrade, their first sync rewrites every record) and for those owned
	// elsewhere (this replica has no connection to them, their holder
	// may); it merges the others' exports without those this replica owns
	// and cannot connect: they would freeze the import for every other
	// member.
	wait := false
	out.unreadable = len(unreadable)
	for _, u := range unreadable {
		src := u.src
		klog.InfoS("Export record unreadable; the merge waits for the member's sync to rewrite it", "cluster", src.Cluster, "key", src.String(), "err", u.err)
		out.queue(src)
		if st, _ := c.members.Lookup(src.Cluster); st.Phase >= lifecycle.Connected || st.Registered() && !st.Owned {
			wait = true
		}
	}
	if wait {
		return nil
	}
	var want *endpoints.ImportResult
	if len(exports) > 0 {
		if ok, err := c.ensureNamespace(ctx, key, out); !ok {
			return err
		}
		res := endpoints.MergeImport(key.Namespace, key.Name, exports)
		want = &res
	}

	// Plan and apply until the plan is empty: each round plans on what the
	// previous one wrote (see endpoints.ImportPlan).
	var before *mcsv1beta1.ServiceImport
	for round := range importRounds {
		view, holder, err := c.read.readImport(ctx, key)
		if err != nil {
			return err
		}
		var aliasHolder hubObject
		if view.Alias, aliasHolder, err = c.read.readAlias(ctx, key); err != nil {
			return err
		}
		view.AliasTaken = aliasHolder != nil
		if round == 0 {
			before = view.Import
		}
		plan := endpoints.PlanImport(want, view, endpoints.ImportOptions{AliasDomain: c.opts.AliasDomain})
		if plan.Empty() {
			for _, k := range c.importReaders(key, before, view.Import) {
				out.queue(k)
			}
			// The hub holds the import the merge planned, conflicts and
			// all (none when a name conflict leaves it unwritten).
			out.setConflicts(view.Import, conflicts(want))
			if holder != nil && want != nil {
				return newConflict(resourceServiceImport, holder, key)
			}
			if aliasHolder != nil && want != nil && c.opts.AliasDomain != "" {
				return newConflict(resourceService, aliasHolder, key)
			}
			return nil
		}
		if err := c.write.applyImport(ctx, key, plan); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s: %w", key, errNoFixedPoint)
}

// registered lists the registered members, connected or not.
func (c *Controller) registered() []string {
	var out []string
	for _, name := range c.members.Names() {
		if st, _ := c.members.Lookup(name); st.Registered() {
			out = append(out, name)
		}
	}
	return out
}

// importReaders are the member keys of the clusters a ServiceImport
// listed before a change or lists after it, when the change altered what
// their syncs read of it: the ports it claims from their exports
// (endpoints.ImportPortClaims), which their MCS slices follow, what it asks
// of their hints (endpoints.LocalityOf), or, where
// ServiceExport conditions are written, the clusters it lists and its
// Conflict condition, which their syncs copy onto the ServiceExports.
func (c *Controller) importReaders(key Key, before, after *mcsv1beta1.ServiceImport) []Key {
	changed := c.writesExportStatus() && exportFacing(before) != exportFacing(after) ||
		!endpoints.ImportPortClaims(before).Equal(endpoints.ImportPortClaims(after)) ||
		endpoints.LocalityOf(before) != endpoints.LocalityOf(after)
	// Every cluster of both when what they read changed; else only those
	// newly listed, which may have read an import that did not count them
	// yet (their record reached the merging replica late).
	clusters, listed := map[string]bool{}, map[string]bool{}
	if before != nil {
		for _, s := range before.Status.Clusters {
			listed[s.Cluster], clusters[s.Cluster] = true, changed
		}
	}
	if after != nil {
		for _, s := range after.Status.Clusters {
			clusters[s.Cluster] = clusters[s.Cluster] || changed || !listed[s.Cluster]
		}
	}
	maps.DeleteFunc(clusters, func(_ string, read bool) bool { return !read })
	out := make([]Key, 0, len(clusters))
	for _, cluster := range slices.Sorted(maps.Keys(clusters)) {
		out = append(out, Key{Cluster: cluster, Namespace: key.Namespace, Name: key.Name})
	}
	return out
}

// exportFacing is what a ServiceImport tells its exports: the clusters it
// lists and its Conflict condition (status, reason, message); "none" for no
// import, which no import's facing can equal.
func exportFacing(imp *mcsv1beta1.ServiceImport) string {
	if imp == nil {
		return "none"
	}
	clusters := make([]string, 0, len(imp.Status.Clusters))
	for _, s := range imp.Status.Clusters {
		clusters = append(clusters, s.Cluster)
	}
	slices.Sort(clusters)
	out := "clusters " + strings.Join(clusters, ",")
	if c := meta.FindStatusCondition(imp.Status.Conditions, endpoints.ConditionConflict); c != nil {
		out += "\n" + string(c.Status) + "\n" + c.Reason + "\n" + c.Message
	}
	return out
}

func conflicts(res *endpoints.ImportResult) []endpoints.Conflict {
	if res == nil {
		return nil
	}
	return res.Conflicts
}
