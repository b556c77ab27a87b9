// Package sync is the controller that keeps the hub in line with its members.
//
// Member and hub informers feed one typed, rate-limited workqueue keyed
// {Cluster, Namespace, Name}. A key with a cluster (a member key) owns the hub
// objects sourced from that one member service (per-cluster Service and
// Endpoints, MCS EndpointSlices) and the conditions of its ServiceExport; a
// key without one (a clusterset key) owns the objects that merge across
// members (ServiceImport and derived Service). Workers compute the desired
// objects with package endpoints, compare them with the hub's caches and
// write only what differs. Nothing is periodic: every sync is computed from
// caches, so running it again writes nothing.
//
// # The parts
//
// Controller wires the parts below, maps events to keys (handlers.go) and
// runs the workers; each part owns its state:
//
//   - keyQueue (queue.go): the workqueue, the order it hands keys out in
//     (lanes.go), and the count of keys queued, in flight or retrying.
//   - hubCaches (hubcaches.go): the hub informers and listers; our
//     EndpointSlices and Endpoints are watched as metadata and cached as
//     the digests their annotation carries (hubdigests.go).
//   - hubReader (reader.go) and hubWriter (writer.go, apply.go): the read
//     and apply steps of a sync.
//   - written (written.go): our writes the hub caches have not shown yet.
//   - waits (waits.go): the keys that wait for a condition; it wakes them
//     into the keyQueue.
//   - memberStates (memberstate.go): what the syncs keep of their keys, by
//     member; reporter (reporter.go) reads the per-member gauges off it.
//   - policyTimers (policy.go): the unreachable policy's timers.
//
// # Who reads what
//
// Only a member key reads its member's caches. It records the export on the
// hub slices it writes (endpoints.ExportRecord); a clusterset key merges
// those records for the registered members and never reads a member. So a
// member that is unreachable, or has not synced since the daemon started,
// counts as the hub last recorded it, and the member keys of different
// members could be handed to different replicas. The member key in turn
// reads the merged import: its MCS slices leave out a port whose name the
// import, in conflict, gives to another export's port (the data plane
// pairs ports by name, so the slice port would take the winner's
// traffic), and it copies what the import says of the exports (listed,
// Conflict) onto its ServiceExport. Each side queues the other when what it
// wrote changes what the other reads: a changed record queues the
// clusterset key (as do slice events, echoes included, and an expired write
// of a slice), and an import whose claimed ports, clusters or Conflict
// condition changed queues the member keys (importReaders).
//
// # Which replica writes a key
//
// With Options.Sharding (package shard), replicas share the members, and a
// sync first asks whether this replica may write its key (fenced, in the
// read step): a member key of a registered member only while this replica
// holds the member's fence (lifecycle.State.Owned), a clusterset key, and
// the member key of an unregistered member once nobody holds its fence,
// only on the merging replica. A key this replica may not write waits for
// OwnershipChanged; one it may write runs under a context that ends at the
// replica's write deadline (OwnedUntil), so no write of it leaves after
// another replica may have started. A handover waits for the member's
// syncs in flight (Busy) before the fence is freed. Without sharding every
// key is this replica's.
//
// What a replica keeps of its keys between syncs (export ledgers,
// refusals, invalid exports, export conflicts) is one store by member,
// memberStates, from which the per-member metrics are read. A sync that
// finds this replica no longer writes its member's keys (not owned here,
// unregistered; a clusterset key: not merging) drops the member's whole
// part in settle, so a replica reports only the members it writes.
// OwnershipChanged and ClusterRemoved queue the keys something is kept of,
// so that such a sync comes. The per-member bounds judge an export against
// all of its member's exports: until each key has synced here, a census
// of the member's caches, taken by a sync of one of its keys, stands in
// for the others (ledger, in bounds.go).
//
// # The shape of one sync
//
// Every sync of a key goes read → plan → apply → settle:
//
//   - read: the member's caches (its Service, ServiceExport and the
//     projections of its EndpointSlices: endpoints.MemberSlice, the only
//     form in which the daemon holds member slices) and the hub view of the
//     key (reader.go),
//     the hub caches overlaid with our unechoed writes (written.go, the
//     write tracker, which only tracks: what it finds, owners to sync
//     again and entries a sync may have read, it keeps as notices that
//     settle and the expiry loop act on). Reading writes
//     nothing and reports nothing; a name held for another source is an
//     error value (conflictError), not an Event.
//   - plan: pure functions of package endpoints (PlanMember, PlanImport).
//   - apply: the plan's writes (apply.go, which counts each write and
//     hands it to the write tracker, written.write); a hub namespace is
//     created here too (writer.go), after the read. The read step is a hubReader (listers, and getters past the
//     cache for names found taken; no client that writes), the apply step
//     a hubWriter (clients, no listers); TestReaderCannotWriteAndWriterHasNoListers
//     holds their types to it.
//   - settle (settle.go): the one place that turns what the sync found
//     into Events, metrics, log lines, the keys it found work for and the
//     preconditions it waits for. The steps fill in an outcome; settle
//     applies it whatever the sync returned, and the worker (processNext)
//     then queues the key again as its error asks.
//
// TestSyncStepsLeaveOutcomesToSettle holds the step files to it: they never
// record an Event, touch a metric or queue a key themselves. A new feature
// adds a field to outcome, not a side effect to a step.
//
// Keys are queued one way, keyQueue.add, with the reason (why) that
// decides their lane, their member's turn and any coalescing; the worker's
// retries alone go to the rate-limited queue directly.
//
// # Members
//
// A member's state is a lifecycle.State, looked up once per sync
// (Members.Lookup): Unregistered, Registered (no connection: its
// registration could not be turned into one, and is retried), Connected
// (caches not synced) or Synced, and whether it is unreachable since when.
// Only an Unregistered member's objects are withdrawn outright. A
// registered member without a full view keeps what the hub holds and waits
// for its sync; an unreachable one is subject to the unreachable policy:
// kept, marked not ready after the grace period (Synced members only: the
// others have no endpoints to mark), withdrawn after the withdraw period.
// Each unreachable member has at most one policy timer (policyTimers), set
// to the moment its next step takes effect; the step resyncs the member's
// keys and sets the timer to the step after it, and a recovery or removal
// stops it.
//
// An outage belongs to the member, not to a replica or a connection. The
// replica that owns a member publishes its view on the member's liveness
// Lease (leases.go), reachable or not since when; every replica caches the
// member Leases, and reads an unreachable member's state with the earlier
// of its own outage start and the one its Lease publishes (outageStart),
// so that a handover or a restart does not reset the policy's clock. The
// merging replica deletes the Leases of unregistered members found in that
// cache.
//
// # Convergence: no deferral without a wake-up
//
// The controller is level-triggered: whatever order events, member syncs,
// echoes of our writes and failures arrive in, the hub ends up equal to what
// the members say. That holds only if every key whose sync did not finish is
// synced again once it can. Hence the rule:
//
//   - A sync that fails returns its error; the queue retries the key with
//     backoff. A name held by someone else's object is retried slowly.
//   - A sync that returns without finishing because a precondition does not
//     hold records its key against that precondition (waits.waitFor)
//     and returns nil. The transition that makes the precondition hold wakes
//     exactly the keys recorded against it (waits.wake). The
//     preconditions and their transitions are:
//     a member's first sync (ClusterSynced) or the withdraw step of its
//     unreachable policy, the member registrations known
//     (startup), a hub namespace (its add event), and for a clusterset key
//     no member key of its service left in the bulk lane (the worker that
//     takes the last one out wakes it), so a sweep merges once, not once per
//     member. A member that is removed wakes what waited for it. Nothing
//     waits for a member's sync timeout: the merge reads the hub's records.
//     A key waits only for what its last sync found missing: its waits are
//     dropped before each of its syncs, and with its member.
//   - A merge that finds an export record it cannot read queues the member
//     key whose sync rewrites it (for a member owned elsewhere, its
//     holder's sync does); the rewrite queues the merge again.
//   - waitFor checks the precondition again after recording, so a transition
//     that races the sync is never missed.
//   - A write that the hub cache has not shown yet is read back from the
//     write tracker (read-your-writes); when its echo does not come within
//     writtenTTL the entry expires and queues its owner.
//   - A sync that finds the hub cache behind the API server returns
//     errStaleCache: the watch event that brings the cache up to date queues
//     the key, and a delayed retry stands in should that event never come.
//
// A sync never defers on the hope that some unrelated event will wake it.
// TestExploreOrders checks the rule by exploring orders with a seeded
// scheduler; a failing seed replays with -seed.
package sync
