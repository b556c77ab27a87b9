package app

import (
	"context"
	"math"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/daemonconfig"
)

// published is the configuration the daemon publishes on the hub: the flags
// explain, status and cleanup mirror, by the daemon's flag names.
func (o *Options) published() daemonconfig.Config {
	b := strconv.FormatBool
	leaderLease := o.LeaderElectionID
	if !o.LeaderElect {
		leaderLease = "" // cleanup's "no leader election Lease"
	}
	return daemonconfig.Config{Version: version(), Flags: map[string]string{
		"namespace":                  o.Namespace,
		"export-mode":                o.ExportMode,
		"include-namespaces":         daemonconfig.List(o.IncludeNamespaces),
		"exclude-namespaces":         daemonconfig.List(o.ExcludeNamespaces),
		"create-namespaces":          b(o.CreateNamespaces),
		"per-cluster-services":       o.PerClusterServices,
		"hub-is-member":              b(o.HubIsMember),
		"hub-cluster-name":           o.HubClusterName,
		"prefer-local":               b(o.PreferLocal),
		"clusterset-alias":           b(o.ClustersetAlias),
		"cluster-domain":             o.ClusterDomain,
		"unreachable-grace":          o.UnreachableGrace.String(),
		"unreachable-withdraw":       o.UnreachableWithdraw.String(),
		"member-lease-duration":      o.MemberLeaseDuration.String(),
		"denied-endpoint-cidrs":      daemonconfig.List(o.DeniedEndpointCIDRs),
		"allowed-endpoint-cidrs":     daemonconfig.List(o.AllowedEndpointCIDRs),
		"hub-service-cidrs":          daemonconfig.List(o.HubServiceCIDRs),
		"max-member-services":        strconv.Itoa(o.MaxMemberServices),
		"max-member-endpoints":       strconv.Itoa(o.MaxMemberEndpoints),
		"max-member-read-services":   strconv.Itoa(o.MaxMemberReadServices),
		"max-member-read-endpoints":  strconv.Itoa(o.MaxMemberReadEndpoints),
		"write-export-status":        b(o.WriteExportStatus),
		"cluster-profile-namespaces": daemonconfig.List(o.ClusterProfileNamespaces),
		"cluster-manager":            o.ClusterManager,
		"leader-elect":               b(o.LeaderElect),
		"shard-members":              b(o.ShardMembers),
		"leader-election-id":         leaderLease,
	}}
}

// publishConfig publishes the daemon's configuration on the hub, retrying
// with backoff until it is written or found up to date, or ctx ends. Every
// replica does it at start; a failure costs the operator commands their
// defaults, never the daemon its work.
func (d *Daemon) publishConfig(ctx context.Context) {
	c := d.opts.published()
	ref := klog.KRef(d.opts.Namespace, daemonconfig.Name)
	// Past the cap the delay stays there: Steps only bounds the doubling.
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Cap: 5 * time.Minute, Steps: math.MaxInt32}
	_ = backoff.DelayFunc().Until(ctx, true, true, func(ctx context.Context) (bool, error) {
		written, err := daemonconfig.Publish(ctx, d.hub.CoreV1(), d.opts.Namespace, c)
		switch {
		case err != nil && ctx.Err() == nil:
			klog.ErrorS(err, "Publishing the daemon's configuration; retrying with backoff", "configMap", ref)
			return false, nil
		case written:
			klog.InfoS("Published the daemon's configuration", "configMap", ref, "config", c.String())
		}
		return true, nil
	})
}
