package sync

import "time"

// DefaultWorkers is Options.Workers' default, applied by New when it is not
// positive: the number of concurrent syncs.
const DefaultWorkers = 4

// DefaultMemberLeaseDuration is the duration of the member liveness Leases
// the daemon keeps by default (Options.LeaseDuration; New applies no
// default, as zero turns the Leases off). Readers assume it for a member
// Lease without spec.leaseDurationSeconds.
const DefaultMemberLeaseDuration = 40 * time.Second
