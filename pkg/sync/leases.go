package sync

import (
	"context"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

const (
	// MemberLeasePrefix names a member's liveness Lease: prefix + cluster.
	MemberLeasePrefix = "endpoint-aggregator-member-"
	// LabelLeaseCluster marks a member liveness Lease with its cluster.
	LabelLeaseCluster = "endpoint-aggregator.io/member-cluster"
	leaseHolder       = "endpoint-aggregator"
	resourceLease     = "leases"
)

// The daemon's own view of a member, published on its Lease as it changes,
// so that status and explain see an outage when the daemon does, not only
// when the Lease lapses.
const (
	// AnnotationReachable is "true" while the member answers the daemon's
	// health probe, "false" while it does not (or cannot be connected).
	AnnotationReachable = "endpoint-aggregator.io/reachable"
	// AnnotationReachableSince is when AnnotationReachable last changed
	// (RFC 3339).
	AnnotationReachableSince = "endpoint-aggregator.io/reachable-since"
	// AnnotationErrorReason classifies why the member fails now
	// (clusters.ErrorClass: Unauthorized, ConnectionRefused, Timeout, ...):
	// why it is unreachable, or why its informers cannot list or watch.
	// AnnotationErrorMessage is the error. Both absent when nothing fails.
	AnnotationErrorReason  = "endpoint-aggregator.io/error-reason"
	AnnotationErrorMessage = "endpoint-aggregator.io/error-message"
	// AnnotationAboutID is the member's own cluster id, its About API
	// ClusterProperty cluster.clusterset.k8s.io, as the daemon last read it
	// (cut to 253 bytes); absent when the member names none. The daemon
	// refuses a member whose id is not its registered name.
	AnnotationAboutID = "endpoint-aggregator.io/about-cluster-id"
	// AnnotationServiceExportVersion is the version in which the daemon
	// reads the member's ServiceExports (v1beta1, v1alpha1), or
	// lifecycle.ExportNotServed; absent when it does not read them.
	AnnotationServiceExportVersion = "endpoint-aggregator.io/serviceexport-version"
)

// maxLeaseMessage bounds the error message on a Lease.
const maxLeaseMessage = 1024

// leaseHealth is what a member Lease publishes of the daemon's view.
type leaseHealth struct {
	reachable       bool
	since           time.Time // of an outage; zero: when it is published
	reason, message string
	aboutID         string
	exportVersion   string
}

// desiredLeaseHealth is what the member's Lease should say, and false when
// this replica has nothing to say: the member is not owned here, or is
// connecting with nothing known yet.
func desiredLeaseHealth(st lifecycle.State) (leaseHealth, bool) {
	switch {
	case !st.Registered() || !st.Owned:
		return leaseHealth{}, false
	case st.Unreachable:
		return leaseHealth{since: st.Since, reason: st.Cause, message: st.Reason, aboutID: aboutID(st.AboutID), exportVersion: st.ExportVersion}, true
	case st.Phase == lifecycle.Synced || st.Cause != "":
		return leaseHealth{reachable: true, reason: st.Cause, message: st.Reason, aboutID: aboutID(st.AboutID), exportVersion: st.ExportVersion}, true
	}
	return leaseHealth{}, false
}

// aboutID is a member's untrusted About API id as a Lease holds it.
func aboutID(id string) string {
	if len(id) > 253 {
		return id[:253]
	}
	return id
}

// reasonIdentityMismatch is clusters.ClassIdentityMismatch: a reason whose
// message follows what the member says of itself, not the network's moods.
const reasonIdentityMismatch = "IdentityMismatch"

// healthChanged reports whether l says something else than h: whether the
// member is reachable, the reason it fails, or what it serves. A new
// message of the same reason is not worth a write, it goes with the next
// one; but for an identity mismatch, the message is what the operator must
// read.
func healthChanged(l *coordinationv1.Lease, h leaseHealth) bool {
	return l.Annotations[AnnotationReachable] != strconv.FormatBool(h.reachable) ||
		l.Annotations[AnnotationErrorReason] != h.reason ||
		h.reason == reasonIdentityMismatch && l.Annotations[AnnotationErrorMessage] != leaseMessage(h.message) ||
		l.Annotations[AnnotationAboutID] != h.aboutID ||
		l.Annotations[AnnotationServiceExportVersion] != h.exportVersion
}

// leaseMessage is msg as AnnotationErrorMessage holds it.
func leaseMessage(msg string) string {
	if len(msg) > maxLeaseMessage {
		return msg[:maxLeaseMessage-3] + "..."
	}
	return msg
}

// setHealth writes h into l's annotations; since stays when reachability
// did not change.
func setHealth(l *coordinationv1.Lease, h leaseHealth, now time.Time) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	a := l.Annotations
	if reachable := strconv.FormatBool(h.reachable); a[AnnotationReachable] != reachable || a[AnnotationReachableSince] == "" {
		since := h.since
		if since.IsZero() {
			since = now
		}
		a[AnnotationReachable], a[AnnotationReachableSince] = reachable, since.UTC().Format(time.RFC3339)
	}
	delete(a, AnnotationErrorReason)
	delete(a, AnnotationErrorMessage)
	delete(a, AnnotationAboutID)
	if h.aboutID != "" {
		a[AnnotationAboutID] = h.aboutID
	}
	delete(a, AnnotationServiceExportVersion)
	if h.exportVersion != "" {
		a[AnnotationServiceExportVersion] = h.exportVersion
	}
	if h.reason != "" {
		a[AnnotationErrorReason], a[AnnotationErrorMessage] = h.reason, leaseMessage(h.message)
	}
}

// outageStart is when the outage of a member that this replica finds
// unreachable since own began: the earlier of own and the start its Lease
// publishes, when that says it is unreachable. The outage belongs to the
// member, so a replica that takes it over, or restarts, goes on with the
// previous holder's clock (and, publishing, keeps that start: setHealth).
// The Lease holds whole seconds: a start there that is own's, cut, is own.
// No outage starts before the member's registration (registered; zero: not
// known): an earlier one was another registration's.
func (c *Controller) outageStart(cluster string, own, registered time.Time) time.Time {
	if c.caches.memberLeases == nil {
		return own
	}
	l, err := c.caches.memberLeases.Get(MemberLeasePrefix + cluster)
	if err != nil || l.Annotations[AnnotationReachable] != "false" {
		return own
	}
	published, err := time.Parse(time.RFC3339, l.Annotations[AnnotationReachableSince])
	if err != nil || !published.Before(own.Truncate(time.Second)) {
		return own
	}
	if published.Before(registered) {
		published = registered
	}
	if published.Before(own) {
		return published
	}
	return own
}

// leaseMembers is the registry as the controller reads it: an unreachable
// member is so since outageStart.
type leaseMembers struct {
	Members
	c *Controller
}

func (m leaseMembers) Lookup(name string) (lifecycle.State, Member) {
	st, mem := m.Members.Lookup(name)
	if st.Unreachable {
		st.Since = m.c.outageStart(name, st.Since, st.RegisteredAt)
	}
	return st, mem
}

// wakeLeases asks runMemberLeases to publish the members' health now.
func (c *Controller) wakeLeases() {
	select {
	case c.leaseWake <- struct{}{}:
	default:
	}
}

// runMemberLeases publishes one Lease per member in the daemon's namespace,
// renewed every quarter of its duration (the renewals spread evenly over
// that time) while the member is synced and
// answers its health probe, so anyone can tell a live member from a dead one
// with `kubectl get leases`. Its annotations carry the daemon's view of the
// member (see AnnotationReachable), written when it changes: at once when
// the member's health changes (wakeLeases), else with the period; a member
// that cannot be read gets a Lease that says why, never renewed. Only the
// replica that owns a member writes its Lease. The merging replica deletes
// the Leases of unregistered members, whoever wrote them: those the Lease
// cache holds (see watchMemberLeases) and those it wrote itself.
func (c *Controller) runMemberLeases(ctx context.Context) {
	if c.caches.memberLeases == nil {
		return
	}
	known := map[string]*coordinationv1.Lease{}
	period := c.opts.LeaseDuration / 4
	next := time.Now()
	for {
		timer := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-c.leaseWake:
			timer.Stop()
			c.publishMemberHealth(ctx, known)
			continue
		case <-timer.C:
		}
		// Not sliding: the next period starts period after this one did.
		next = next.Add(period)
		if now := time.Now(); next.Before(now) {
			next = now
		}
		c.renewMemberLeases(ctx, known, period)
	}
}

// renewMemberLeases is one period of runMemberLeases.
func (c *Controller) renewMemberLeases(ctx context.Context, known map[string]*coordinationv1.Lease, period time.Duration) {
	registered := map[string]bool{}
	names := c.members.Names()
	// Spread the renewals over most of the period: a burst of one
	// write per member at once would queue on the lease client's rate
	// limiter and load the hub API server in spikes.
	pace := time.NewTicker(max(time.Millisecond, period*4/5/time.Duration(max(1, len(names)))))
	defer pace.Stop()
	for i, name := range names {
		registered[name] = true
		for waited := i == 0; !waited; {
			select {
			case <-ctx.Done():
				return
			case <-c.leaseWake:
				c.publishMemberHealth(ctx, known)
			case <-pace.C:
				waited = true
			}
		}
		st, _ := c.members.Lookup(name)
		h, publish := desiredLeaseHealth(st)
		if !publish {
			continue // not written here: by its owner, or it expires on its own
		}
		renew := st.Phase == lifecycle.Synced && !st.Unreachable
		c.writeMemberLease(ctx, name, known, h, renew)
	}
	if merging, _ := c.owns(Key{}, lifecycle.State{}); !merging {
		return // the merging replica deletes the Leases of unregistered members
	}
	if !c.members.SecretsSynced() {
		return // a name not known yet may still be registered
	}
	c.deleteMemberLeases(ctx, known, registered)
}

// deleteMemberLeases deletes the Leases of the members not registered:
// those in the Lease cache, written by any replica (or left behind while
// the daemon was down), and those in known, written here and perhaps not
// cached yet.
func (c *Controller) deleteMemberLeases(ctx context.Context, known map[string]*coordinationv1.Lease, registered map[string]bool) {
	stale := map[string]bool{}
	for name := range known {
		stale[name] = !registered[name]
	}
	if c.caches.leaseInf.HasSynced() {
		cached, err := c.caches.memberLeases.List(labels.Everything())
		if err != nil {
			klog.ErrorS(err, "Listing the cached member Leases failed")
		}
		for _, l := range cached {
			if name := l.Labels[LabelLeaseCluster]; name != "" {
				stale[name] = !registered[name]
			}
		}
	}
	for name, gone := range stale {
		if !gone {
			continue
		}
		if st, _ := c.members.Lookup(name); st.Registered() {
			continue // registered since Names
		}
		err := c.leases.CoordinationV1().Leases(c.opts.LeaseNamespace).Delete(ctx, MemberLeasePrefix+name, metav1.DeleteOptions{})
		c.write.countWrite(resourceLease, verbDelete, err)
		if err == nil || apierrors.IsNotFound(err) {
			delete(known, name)
		}
	}
}

// publishMemberHealth writes the Leases whose health changed, and nothing
// else: renewals keep their period.
func (c *Controller) publishMemberHealth(ctx context.Context, known map[string]*coordinationv1.Lease) {
	for _, name := range c.members.Names() {
		st, _ := c.members.Lookup(name)
		h, publish := desiredLeaseHealth(st)
		if !publish || (known[name] != nil && !healthChanged(known[name], h)) {
			continue
		}
		c.writeMemberLease(ctx, name, known, h, st.Phase == lifecycle.Synced && !st.Unreachable)
	}
}

// writeMemberLease renews the member's Lease, or writes its health when
// that changed, and remembers what it wrote.
func (c *Controller) writeMemberLease(ctx context.Context, name string, known map[string]*coordinationv1.Lease, h leaseHealth, renew bool) {
	if l, err := c.renewLease(ctx, name, known[name], h, renew); err != nil {
		klog.V(2).InfoS("Writing member Lease failed", "cluster", name, "renew", renew, "err", err)
		delete(known, name)
	} else {
		known[name] = l
	}
}

// renewLease creates or renews a member's Lease, with h in its annotations;
// last is what we last wrote (nil when unknown). Unless renew, it only
// writes h, when it changed, and creates a Lease that was never renewed.
func (c *Controller) renewLease(ctx context.Context, cluster string, last *coordinationv1.Lease, h leaseHealth, renew bool) (*coordinationv1.Lease, error) {
	api := c.leases.CoordinationV1().Leases(c.opts.LeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	if last == nil {
		got, err := api.Get(ctx, MemberLeasePrefix+cluster, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: c.opts.LeaseNamespace,
					Name:      MemberLeasePrefix + cluster,
					Labels:    map[string]string{endpoints.LabelManagedBy: endpoints.ManagedByValue, LabelLeaseCluster: cluster},
				},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity:       ptr.To(leaseHolder),
					LeaseDurationSeconds: ptr.To(int32(c.opts.LeaseDuration / time.Second)),
				},
			}
			if renew {
				l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
			}
			setHealth(l, h, now.Time)
			out, err := api.Create(ctx, l, metav1.CreateOptions{FieldManager: fieldManager})
			c.write.countWrite(resourceLease, verbCreate, err)
			return out, err
		case err != nil:
			return nil, err
		}
		last = got
	}
	if !renew && !healthChanged(last, h) {
		return last, nil
	}
	l := last.DeepCopy()
	if renew {
		l.Spec.HolderIdentity = ptr.To(leaseHolder)
		l.Spec.LeaseDurationSeconds = ptr.To(int32(c.opts.LeaseDuration / time.Second))
		if l.Spec.AcquireTime == nil {
			l.Spec.AcquireTime = &now
		}
		l.Spec.RenewTime = &now
	}
	setHealth(l, h, now.Time)
	out, err := api.Update(ctx, l, metav1.UpdateOptions{FieldManager: fieldManager})
	c.write.countWrite(resourceLease, verbUpdate, err)
	return out, err
}
