package clusters

import "time"

// Defaults of Options, applied by NewRegistry to fields that are not
// positive. The daemon's flags default to the same values.
const (
	// DefaultSyncTimeout is Options.SyncTimeout's default: how long a member
	// may take to sync before it counts as timed out for readiness.
	DefaultSyncTimeout = 30 * time.Second
	// DefaultProbeInterval and DefaultProbeTimeout are the defaults of
	// Options.ProbeInterval and Options.ProbeTimeout: an unreachable member
	// is noticed after probeFailureThreshold failed probes, within
	// interval + 2 × timeout.
	DefaultProbeInterval = 5 * time.Second
	DefaultProbeTimeout  = 5 * time.Second
)
