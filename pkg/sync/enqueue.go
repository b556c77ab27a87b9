package sync

// why is the reason a key is queued, which decides where it waits: in the
// live lane or the bulk one, in whose member's turn (see lanes), and for a
// merge a sweep found, after a coalescing delay.
type why struct {
	// bulk: a sweep (a member's first sync or resync, startup, a wake
	// after a transition) rather than a change.
	bulk bool
	// origin is the member in whose turn the key waits; "" is the key's
	// own (none for a clusterset key).
	origin string
	// coalesce: a clusterset key merged once after mergeCoalesce, as the
	// records of a sweep arrive one member at a time.
	coalesce bool
}

// A change (an event, a write that did not echo) or a sweep.
var (
	aChange = why{}
	aSweep  = why{bulk: true}
)

// lane is a change, or a sweep when bulk.
func lane(bulk bool) why { return why{bulk: bulk} }

// foundBy is why a sync of from queues key: the work it found is as urgent
// as its own, in its lane. A clusterset key waits in the turn of the member
// whose sync queued it; one found by a sweep is coalesced.
func (c *Controller) foundBy(from, key Key) why {
	bulk := c.lanes.servedBulk(from)
	if key.IsClusterSet() {
		return why{bulk: bulk, origin: from.Cluster, coalesce: bulk}
	}
	return why{bulk: bulk}
}

// enqueueFound queues key, which a sync of from found work for.
func (c *Controller) enqueueFound(from, key Key) {
	w := c.foundBy(from, key)
	c.enqueue(key, w)
}

// enqueue is the one way a key is queued; only the worker's retries go to
// the rate-limited queue directly. Until Run starts the workers every key
// goes in bulk: a standby queues the leader's writes as it sees them, and
// at its takeover a real change must not wait behind them.
func (c *Controller) enqueue(key Key, w why) {
	if w.coalesce {
		c.retryingMu.Lock()
		c.coalescing[key] = struct{}{}
		c.retryingMu.Unlock()
		c.queue.AddAfter(key, mergeCoalesce)
		return
	}
	origin := w.origin
	if origin == "" {
		origin = key.Cluster
	}
	c.lanes.mark(key, w.bulk || !c.HasStarted(), origin)
	c.queue.Add(key)
}
