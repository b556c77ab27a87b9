// Package lifecycle is the one description of where a member cluster is in
// its life, shared by the registry that moves it along and the sync that
// acts on it:
//
//	Unregistered → Registered → Connected → Synced
//
// A member is Registered once a Secret, a ClusterProfile or a flag names it;
// Connected once its registration became a running connection; Synced once
// that connection's caches hold a full view. Across all three it may be
// unreachable: it has no connection, or its connection fails its health
// probes. Only Unregistered withdraws a member's hub objects outright; an
// unreachable member is subject to the unreachable policy (keep, grace,
// withdraw), whatever phase it is in.
package lifecycle

import (
	"net/netip"
	"time"
)

// Phase is how far a member got.
type Phase int

const (
	// Unregistered: nothing names the member (or no longer does).
	Unregistered Phase = iota
	// Registered: a registration names the member, but it has no
	// connection: the registration could not be turned into one yet
	// (refused or broken kubeconfig, client failure). It is retried.
	Registered
	// Connected: a connection runs; its caches have not synced yet.
	Connected
	// Synced: the connection's caches hold a full view.
	Synced
)

func (p Phase) String() string {
	switch p {
	case Unregistered:
		return "Unregistered"
	case Registered:
		return "Registered"
	case Connected:
		return "Connected"
	case Synced:
		return "Synced"
	}
	return "Unknown"
}

// State is a member's lifecycle state, read at once: its fields agree with
// each other.
type State struct {
	Phase Phase
	// Owned reports whether this replica may write the member's hub
	// objects now: without sharding, every registered member is owned;
	// with it, only while this replica holds the member's fence (package
	// shard), until OwnedUntil (zero: no limit). A member registered but
	// not owned is not gone.
	Owned      bool
	OwnedUntil time.Time
	// Unreachable reports that the member cannot be read now: it has no
	// connection (Registered), or its health probe fails. Since is when
	// that started.
	Unreachable bool
	Since       time.Time
	// Reason says why the member is unreachable, for Events and status.
	Reason string
	// Cause classifies why the member fails (clusters.ErrorClass:
	// "Unauthorized", "Timeout", ...): why it is unreachable, or, while it
	// answers its probe, why its informers cannot list or watch (Reason
	// then says what failed). "" when nothing fails.
	Cause string
	// Policy holds the registration's overrides of the daemon's policies.
	Policy Policy
	// AboutID is the member's own cluster id, its About API ClusterProperty
	// cluster.clusterset.k8s.io, at the daemon's last look; "" when it
	// names none (or was not read).
	AboutID string
	// ExportVersion is the version in which the member's ServiceExports
	// were last read ("v1beta1", "v1alpha1"), ExportNotServed when it
	// serves no ServiceExport, "" when they are not read (or not yet).
	ExportVersion string
	// RegisteredAt is when the hub first saw the registration (its
	// creationTimestamp, by the hub's clock); zero for a member the daemon
	// registers itself. No export of the member counts as older.
	RegisteredAt time.Time
}

// ExportNotServed is the ExportVersion of a member that serves no
// ServiceExport: it is synced with nothing exported, not failing.
const ExportNotServed = "none"

// Registered reports whether a registration names the member.
func (s State) Registered() bool { return s.Phase != Unregistered }

// Policy holds a registration's overrides of the daemon's policies.
type Policy struct {
	// Grace and Withdraw override the unreachable policy's durations; nil
	// keeps the daemon's, zero turns the step off.
	Grace, Withdraw *time.Duration
	// AllowedEndpoints, when not nil, are the only ranges the member's
	// endpoints may be in, besides the daemon's own allowed ranges (it
	// narrows them, never widens). Empty: none, as for a registration
	// whose list cannot be read.
	AllowedEndpoints []netip.Prefix
}

// Resolve applies the overrides to the daemon's grace and withdraw
// durations.
func (p Policy) Resolve(grace, withdraw time.Duration) (time.Duration, time.Duration) {
	if p.Grace != nil {
		grace = *p.Grace
	}
	if p.Withdraw != nil {
		withdraw = *p.Withdraw
	}
	return grace, withdraw
}

// Step is what the unreachable policy does to a member's hub objects.
type Step int

const (
	// Keep shows the last-known endpoints unchanged.
	Keep Step = iota
	// MarkNotReady shows every endpoint not ready (after grace).
	MarkNotReady
	// Withdraw removes the member's hub objects (after withdraw).
	Withdraw
)

// UnreachableStep returns the step of the unreachable policy that applies
// at now, given the daemon's grace and withdraw durations, and when the
// next step takes effect (zero when none follows).
func (s State) UnreachableStep(now time.Time, grace, withdraw time.Duration) (Step, time.Time) {
	if !s.Unreachable {
		return Keep, time.Time{}
	}
	grace, withdraw = s.Policy.Resolve(grace, withdraw)
	age := now.Sub(s.Since)
	step := Keep
	switch {
	case withdraw > 0 && age >= withdraw:
		return Withdraw, time.Time{}
	case grace > 0 && age >= grace:
		step = MarkNotReady
	}
	var next time.Time
	if grace > 0 && age < grace && (withdraw <= 0 || grace < withdraw) {
		next = s.Since.Add(grace)
	} else if withdraw > 0 {
		next = s.Since.Add(withdraw)
	}
	return step, next
}
