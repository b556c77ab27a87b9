package sync

import (
	stdsync "sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
)

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

// retry tuning: per-key exponential backoff from 5ms, capped at 30s, and
// at most 10 retries/s (burst 100) overall. A key is retried until it
// succeeds: dropping it would leave the hub stale until the next event. A
// hub outage fails every key that changes meanwhile, each change a retry
// more; the cap bounds how long such a key waits once the hub is back.
const (
	retryBase     = 5 * time.Millisecond
	retryMax      = 30 * time.Second
	conflictRetry = 5 * time.Minute
	staleRetry    = time.Second
)

// queueName names the workqueue in its metrics.
const queueName = "endpoint_aggregator"

// keyQueue is the controller's queue of keys: the rate-limited workqueue,
// the order in which it hands keys out (lanes), and the count of the keys
// queued, in flight or waiting out a retry (Pending, Busy).
type keyQueue struct {
	wq    workqueue.TypedRateLimitingInterface[Key]
	lanes *lanes // the order: live changes before bulk sweeps

	// started is closed once the workers run (start).
	started   chan struct{}
	startOnce stdsync.Once

	mu stdsync.Mutex
	// retrying holds the keys waiting out a backoff after an error; the
	// workqueue does not count them in Len.
	retrying map[Key]struct{}
	// busy counts the syncs in flight by member ("": clusterset keys).
	busy map[string]int
	// coalescing holds the clusterset keys added after mergeCoalesce and
	// not synced since.
	coalescing map[Key]struct{}
}

func newKeyQueue() *keyQueue {
	lanes := newLanes()
	return &keyQueue{
		wq: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[Key](retryBase, retryMax),
				&workqueue.TypedBucketRateLimiter[Key]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
			),
			workqueue.TypedRateLimitingQueueConfig[Key]{
				Name: queueName,
				DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[Key]{
					Name:  queueName,
					Queue: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[Key]{Name: queueName, Queue: lanes}),
				}),
			}),
		lanes:      lanes,
		started:    make(chan struct{}),
		retrying:   map[Key]struct{}{},
		busy:       map[string]int{},
		coalescing: map[Key]struct{}{},
	}
}

// start says the workers run: from now on a change goes in the live lane.
func (q *keyQueue) start() { q.startOnce.Do(func() { close(q.started) }) }

func (q *keyQueue) hasStarted() bool {
	select {
	case <-q.started:
		return true
	default:
		return false
	}
}

// foundBy is why a sync of from queues key: the work it found is as urgent
// as its own, in its lane. A clusterset key waits in the turn of the member
// whose sync queued it; one found by a sweep is coalesced.
func (q *keyQueue) foundBy(from, key Key) why {
	bulk := q.lanes.servedBulk(from)
	if key.IsClusterSet() {
		return why{bulk: bulk, origin: from.Cluster, coalesce: bulk}
	}
	return why{bulk: bulk}
}

// addFound queues key, which a sync of from found work for.
func (q *keyQueue) addFound(from, key Key) {
	q.add(key, q.foundBy(from, key))
}

// add is the one way a key is queued; only the worker's retries go to the
// rate-limited queue directly. Until the workers start every key goes in
// bulk: a standby queues the leader's writes as it sees them, and at its
// takeover a real change must not wait behind them.
func (q *keyQueue) add(key Key, w why) {
	if w.coalesce {
		q.mu.Lock()
		q.coalescing[key] = struct{}{}
		q.mu.Unlock()
		q.wq.AddAfter(key, mergeCoalesce)
		return
	}
	origin := w.origin
	if origin == "" {
		origin = key.Cluster
	}
	q.lanes.mark(key, w.bulk || !q.hasStarted(), origin)
	q.wq.Add(key)
}

// get hands out the next key, counted in flight until done, and the
// clusterset keys whose sources left the bulk lane since; quit once the
// queue is shut down.
func (q *keyQueue) get() (key Key, drained []Key, quit bool) {
	key, quit = q.wq.Get()
	if quit {
		return key, nil, true
	}
	q.mu.Lock()
	q.busy[key.Cluster]++
	delete(q.coalescing, key)
	q.mu.Unlock()
	return key, q.lanes.takeDrained(), false
}

// finish takes key, synced, out of its lane's accounts.
func (q *keyQueue) finish(key Key) { q.lanes.finish(key) }

// done counts key's sync out of flight and tells the workqueue it is
// processed.
func (q *keyQueue) done(key Key) {
	q.mu.Lock()
	if q.busy[key.Cluster]--; q.busy[key.Cluster] == 0 {
		delete(q.busy, key.Cluster)
	}
	q.mu.Unlock()
	q.wq.Done(key)
}

// succeeded forgets key's backoff.
func (q *keyQueue) succeeded(key Key) {
	q.wq.Forget(key)
	q.setRetrying(key, false)
}

// retryAfter queues key again after d, without backoff; retrying says
// whether it counts as Pending meanwhile.
func (q *keyQueue) retryAfter(key Key, d time.Duration, retrying bool) {
	q.wq.Forget(key)
	q.setRetrying(key, retrying)
	q.wq.AddAfter(key, d)
}

// retry queues key again with backoff.
func (q *keyQueue) retry(key Key) {
	q.setRetrying(key, true)
	q.wq.AddRateLimited(key)
}

// retries is how many times key was retried with backoff.
func (q *keyQueue) retries(key Key) int { return q.wq.NumRequeues(key) }

func (q *keyQueue) setRetrying(key Key, retrying bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if retrying {
		q.retrying[key] = struct{}{}
	} else {
		delete(q.retrying, key)
	}
}

// bulkPending is the number of member keys of a clusterset key's service
// waiting in the bulk lane.
func (q *keyQueue) bulkPending(key Key) int { return q.lanes.bulkPending(key) }

// len is the number of keys queued (not in flight, not waiting out a
// retry).
func (q *keyQueue) len() int { return q.wq.Len() }

// pending is the number of keys queued, being synced, waiting to retry
// after an error, or to merge after mergeCoalesce.
func (q *keyQueue) pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	inFlight := 0
	for _, n := range q.busy {
		inFlight += n
	}
	return q.wq.Len() + len(q.retrying) + inFlight + len(q.coalescing)
}

// busyMembers returns the members with syncs in flight ("": clusterset
// keys).
func (q *keyQueue) busyMembers() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	members := make([]string, 0, len(q.busy))
	for m := range q.busy {
		members = append(members, m)
	}
	return members
}

// busyWith reports whether a sync of one of cluster's keys is in flight.
func (q *keyQueue) busyWith(cluster string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.busy[cluster] > 0
}

func (q *keyQueue) shutDown() { q.wq.ShutDown() }

// mergeCoalesce is how long a clusterset key queued by a sweep (a member's
// first sync, a restart backlog) or by a slice event waits before its merge:
// records arrive one member at a time, and merging after each would rewrite
// the import once per member. A live change merges at once.
const mergeCoalesce = time.Second
