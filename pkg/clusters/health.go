package clusters

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/addresses"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

// Per-registration overrides of the daemon's unreachable policy, as
// durations ("90s", "10m"). "0" turns the step off for that member.
const (
	AnnotationUnreachableGrace    = "endpoint-aggregator.io/unreachable-grace"
	AnnotationUnreachableWithdraw = "endpoint-aggregator.io/unreachable-withdraw"
)

// AnnotationAllowedEndpointCIDRs on a registration pins its member's
// endpoints to these comma-separated CIDRs (its pod ranges, say), within
// the daemon's --allowed-endpoint-cidrs.
const AnnotationAllowedEndpointCIDRs = "endpoint-aggregator.io/allowed-endpoint-cidrs"

// probeFailureThreshold is how many probes in a row must fail before a
// member counts as unreachable: one lost request is not an outage, and each
// flip of health resyncs the member's keys.
const probeFailureThreshold = 2

// health is a member's health as its probes last judged it, stored as one
// value so that a reader never sees the state of one outage with the start
// of another.
type health struct {
	healthy bool
	since   time.Time // start of the current outage; zero while healthy
	cause   *Failure  // why the probes fail; nil while healthy
}

// Failure is why a member fails: the class of its error, the error, and
// since when it fails for that class.
type Failure struct {
	Class   ErrorClass
	Message string
	Since   time.Time
}

// newFailure classifies err, which happened at since.
func newFailure(err error, since time.Time) *Failure {
	return &Failure{Class: Classify(err), Message: err.Error(), Since: since}
}

// probeLoop checks the member's API server every interval with a bounded
// request, so a member that hangs (a partition, a frozen process) is noticed
// even when it has no events to send, and a quiet member does not look dead.
// It probes from the start: a probe that succeeds after an outage asks for
// fresh informers (see runInformers); before the first sync, after one
// failed probe; after it, only after an outage of the informers too (see
// "Reconnecting" in informers.go): under load a relist per slow probe
// feeds the load that slowed it.
// Health is reported from the start, before the first sync too, so that the
// unreachable policy applies to a member that is dark when the daemon
// starts: onChange is called when health flips, and when the first probes
// fail. Health flips to unreachable after probeFailureThreshold failures in
// a row, dated from the first of them, and back at the first success.
// While unreachable, failures of another cause than the last reported
// (refused, then timing out; see newCause), probeFailureThreshold in a
// row, are reported too, with onChange(false).
//
// The first probe waits a random part of the interval (or a probeNow):
// members registered together, as every member is when the daemon starts,
// are then probed spread over the interval instead of all at once, at
// start and every interval after.
func (c *Cluster) probeLoop(interval, timeout time.Duration, onChange func(healthy bool)) {
	first := time.NewTimer(rand.N(interval))
	select {
	case <-c.stop:
		first.Stop()
		return
	case <-first.C:
	case <-c.probeNow:
		first.Stop()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	known := false   // a result was recorded
	answered := true // the previous probe succeeded (or there was none)
	failures := 0
	var firstFailure time.Time
	// otherClass counts the failures in a row, while unreachable, of
	// another class than the one reported: it is reported after
	// probeFailureThreshold of them, so that a cause flapping between
	// two classes is not reported on every probe.
	otherClass := 0
	for {
		now := time.Now()
		err := c.probe(timeout)
		healthy := err == nil
		if healthy && !answered && c.informersBehind(failures, firstFailure.Add(-interval)) {
			c.askReconnect()
		}
		answered = healthy
		if healthy {
			failures = 0
		} else {
			if failures == 0 {
				firstFailure = now
			}
			failures++
		}
		cur := c.health.Load()
		switch {
		case healthy && (!known || !cur.healthy):
			c.health.Store(&health{healthy: true})
			if known {
				onChange(true)
			}
			known = true
		case !healthy && failures >= probeFailureThreshold && (!known || cur.healthy):
			c.health.Store(&health{since: firstFailure, cause: newFailure(err, firstFailure)})
			onChange(false)
			known = true
		case !healthy && !cur.healthy && cur.cause != nil && newCause(cur.cause, err):
			if otherClass++; otherClass >= probeFailureThreshold {
				c.health.Store(&health{since: cur.since, cause: newFailure(err, now)})
				onChange(false)
				otherClass = 0
			}
		default:
			otherClass = 0
		}
		select {
		case <-c.stop:
			return
		case <-t.C:
		case <-c.probeNow:
		}
	}
}

// informersBehind reports whether the member's informers may be behind
// after failures probes failed in a row, the outage having begun about
// since: before the first sync, always; after it, when the probes saw an
// outage and a list or watch failed during it.
func (c *Cluster) informersBehind(failures int, since time.Time) bool {
	if !c.synced.Load() {
		return true
	}
	s := c.informers.Load()
	return failures >= probeFailureThreshold && s != nil && s.failedSince(since)
}

// newCause reports whether err is another cause than the one reported: of
// another class, or an identity mismatch that says another thing (its
// message follows the member's properties, not the network's moods).
func newCause(reported *Failure, err error) bool {
	class := Classify(err)
	return class != reported.Class || class == ClassIdentityMismatch && err.Error() != reported.Message
}

// probe asks the member's /readyz, which every authenticated client may read.
// A member whose cluster manager reports its control plane unhealthy fails
// without being asked: the unreachable machinery and policy then apply.
func (c *Cluster) probe(timeout time.Duration) error {
	if reason := c.reported.Load(); reason != nil && *reason != "" {
		return fmt.Errorf("member %q: %w: %s", c.name, errReported, *reason)
	}
	if err := c.over.err(); err != nil {
		return fmt.Errorf("member %q: %w", c.name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rc := c.clients.Kube.Discovery().RESTClient()
	if rc == nil { // fake clients in unit tests
		_, err := c.clients.Kube.Discovery().ServerVersion()
		c.identity.letIn()
		return err
	}
	if err := rc.Get().AbsPath("/readyz").Do(ctx).Error(); err != nil {
		c.identity.letIn() // nothing to judge: its informers fail or wait as before
		klog.V(2).InfoS("Member probe failed", "cluster", c.name, "err", err)
		if apierrors.IsNotFound(err) { // every API server serves /readyz
			return fmt.Errorf("probing member %q: %w: %w", c.name, errNotAPIServer, err)
		}
		return fmt.Errorf("probing member %q: %w", c.name, err)
	}
	clusterSet := ""
	if c.clusterSet != nil {
		clusterSet = c.clusterSet()
	}
	if err := c.checkIdentity(ctx, clusterSet); err != nil {
		return fmt.Errorf("member %q: %w", c.name, err)
	}
	return nil
}

// watchErrorFresh is how long after an informer's list or watch failed
// the failure still counts for a synced member: a reflector retries within
// a minute (its backoff, with jitter), so a failure not seen again for two
// is over.
const watchErrorFresh = 2 * time.Minute

// Failure returns why the member fails now, or nil: the probe's failure
// while unreachable; else the last list or watch failure of its informers,
// until they synced (after they did, for watchErrorFresh).
func (c *Cluster) Failure() *Failure {
	if h := c.health.Load(); !h.healthy && h.cause != nil {
		return h.cause
	}
	w := c.watchErr.Load()
	if w == nil || (c.synced.Load() && time.Since(w.at) > watchErrorFresh) {
		return nil
	}
	return &w.Failure
}

// watchFailure is the latest failed list or watch of the member's informers.
type watchFailure struct {
	Failure
	at time.Time // of this failure; Since is when the class began
}

// watchFailed records a failed list or watch of the member's informers
// (client-go's reflector logs it, with the member's name), and calls
// onWatchFailure when its class differs from the failure recorded before.
func (c *Cluster) watchFailed(err error) {
	if watchClosed(err) {
		return
	}
	now := time.Now()
	f := &watchFailure{Failure: *newFailure(err, now), at: now}
	old := c.watchErr.Load()
	if old != nil && old.Class == f.Class {
		f.Since = old.Since
	}
	c.watchErr.Store(f)
	if old == nil || old.Class != f.Class {
		if cb := c.onWatchFailure; cb != nil {
			cb(f.Failure)
		}
	}
}

// watchClosed reports the errors with which a watch ends in the normal
// course (an expired resourceVersion, a closed stream), which the reflector
// answers with a new list or watch, as client-go's default handler does.
func watchClosed(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err) ||
		apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// UnreachableSince returns when the member stopped answering its probe, and
// whether it is unreachable now. Before the first probe it is not.
func (c *Cluster) UnreachableSince() (time.Time, bool) {
	h := c.health.Load()
	return h.since, !h.healthy
}

// UnreachablePolicy returns the member's unreachable policy, the Secret's
// overrides on top of the daemon's grace and withdraw durations: after grace
// (if > 0) its hub endpoints are marked not ready, after withdraw (if > 0)
// they are withdrawn; zero keeps them as last seen.
func (c *Cluster) UnreachablePolicy(grace, withdraw time.Duration) (time.Duration, time.Duration) {
	return c.policy.Resolve(grace, withdraw)
}

// PolicyOverride holds a registration's overrides of the daemon's policies.
type PolicyOverride = lifecycle.Policy

// ParsePolicyOverride reads the override annotations of a registration. It
// returns what it could read and an error for what it could not, saying
// what applies instead: an unreadable duration keeps the daemon's, an
// unreadable list of allowed CIDRs allows nothing (failing open would let
// the member route anywhere the daemon allows).
func ParsePolicyOverride(annotations map[string]string) (PolicyOverride, error) {
	var p PolicyOverride
	var errs []error
	for _, key := range []string{AnnotationUnreachableGrace, AnnotationUnreachableWithdraw} {
		v, ok := annotations[key]
		if !ok {
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			errs = append(errs, fmt.Errorf("annotation %s=%q is not a non-negative duration; the daemon's applies", key, v))
			continue
		}
		if key == AnnotationUnreachableGrace {
			p.Grace = &d
		} else {
			p.Withdraw = &d
		}
	}
	if v, ok := annotations[AnnotationAllowedEndpointCIDRs]; ok && strings.TrimSpace(v) != "" {
		allowed, err := addresses.ParsePrefixes(strings.Split(v, ","))
		if err != nil {
			errs = append(errs, fmt.Errorf("annotation %s: %v; every endpoint of the member is refused until it is fixed", AnnotationAllowedEndpointCIDRs, err))
			allowed = []netip.Prefix{}
		}
		p.AllowedEndpoints = allowed
	}
	return p, errors.Join(errs...)
}

// settingAnnotations are the annotations ParsePolicyOverride and
// ParseMemberCompression read, for the registration's hash: a change
// rebuilds the connection.
func settingAnnotations(annotations map[string]string) []string {
	return []string{annotations[AnnotationUnreachableGrace], annotations[AnnotationUnreachableWithdraw], annotations[AnnotationAllowedEndpointCIDRs],
		annotations[AnnotationMemberCompression]}
}

// overBound records that informer what of the member read past its bound
// (err), or a complete list within it (nil), and asks for a probe when the
// member went over or came back within every bound.
func (c *Cluster) overBound(what string, err error) {
	if !c.over.set(what, err) {
		return
	}
	if err != nil {
		klog.InfoS("Member over its read bounds: not read until it is back within them", "cluster", c.name, "informer", what, "err", err)
	} else {
		klog.InfoS("Member back within its read bounds", "cluster", c.name)
	}
	select {
	case c.probeNow <- struct{}{}:
	default:
	}
}

// reportUnhealthy records what the cluster manager says of the member's
// control plane ("" for nothing wrong) and asks for a probe when it changed.
func (c *Cluster) reportUnhealthy(reason string) {
	old := c.reported.Swap(&reason)
	if (old == nil && reason == "") || (old != nil && *old == reason) {
		return
	}
	select {
	case c.probeNow <- struct{}{}:
	default:
	}
}
