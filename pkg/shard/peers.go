package shard

import (
	"sort"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// peers tracks the peer Leases as one replica sees them. A peer is alive
// while this replica has seen its Lease renewed within a lease duration on
// its own clock, as client-go's leader election judges a leader: clocks of
// different machines are never compared.
type peers struct {
	mu            sync.Mutex
	leaseDuration time.Duration
	now           func() time.Time
	// started is when this replica began looking: an identity it has never
	// seen counts as renewed then.
	started time.Time
	seen    map[string]*peerRecord // by identity
}

type peerRecord struct {
	renew     string // the Lease's renewTime and resourceVersion, as seen
	observed  time.Time
	draining  bool
	gone      bool // the Lease was deleted: its replica left
	leaseName string
	// resourceVersion is the Lease's as last seen; confirmed the renew
	// that a read from the API server found dead (confirm).
	resourceVersion string
	confirmed       string
}

// absentRenew is the renew of a peer whose Lease the API server did not
// have when asked.
const absentRenew = "absent"

func newPeers(leaseDuration time.Duration, now func() time.Time) *peers {
	return &peers{leaseDuration: leaseDuration, now: now, started: now(), seen: map[string]*peerRecord{}}
}

// observe notes a peer Lease as the watch delivers it.
func (p *peers) observe(l *coordinationv1.Lease) {
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return
	}
	id := *l.Spec.HolderIdentity
	renew := l.ResourceVersion
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.String() + "/" + renew
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.seen[id]
	if r == nil {
		r = &peerRecord{}
		p.seen[id] = r
	}
	if r.renew != renew {
		r.renew, r.observed = renew, p.now()
	}
	r.draining = l.Annotations[AnnotationDraining] == "true"
	r.gone = false
	r.leaseName, r.resourceVersion = l.Name, l.ResourceVersion
}

// absent notes that the API server has no Lease of a peer: a change like a
// renewal, since the replica may have been alive to see it deleted.
func (p *peers) absent(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.seen[id]
	if r == nil {
		r = &peerRecord{leaseName: PeerName(id)}
		p.seen[id] = r
	}
	if r.renew != absentRenew {
		r.renew, r.observed = absentRenew, p.now()
	}
	r.gone = true
}

// confirm reports whether a peer is dead after its Lease was just read
// from the API server (observe or absent), and remembers the answer until
// its Lease changes.
func (p *peers) confirm(id string) bool {
	dead := !p.alive(id)
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.seen[id]; r != nil && dead {
		r.confirmed = r.renew
	}
	return dead
}

// confirmedDead reports whether a peer is dead as the API server showed,
// and nothing this replica saw of it since says otherwise.
func (p *peers) confirmedDead(id string) bool {
	if p.alive(id) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.seen[id]
	return r != nil && r.confirmed != "" && r.confirmed == r.renew
}

// deleted notes that a peer Lease is gone: its replica shut down after
// handing over, and holds nothing.
func (p *peers) deleted(l *coordinationv1.Lease) {
	if l.Spec.HolderIdentity == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.seen[*l.Spec.HolderIdentity]; r != nil {
		r.gone = true
	}
}

// alive reports whether the replica with this identity may still write:
// its Lease was renewed within a lease duration as this replica saw it. A
// replica never seen counts from when this one started looking, so a
// fence held by a replica that died before this one started is taken a
// lease duration after the start. A deleted Lease is a replica that left
// and holds nothing; it is dead too, but only a lease duration after its
// last renewal, in case it still writes.
func (p *peers) alive(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	since := p.started
	if r := p.seen[id]; r != nil {
		since = r.observed
	}
	return p.now().Sub(since) < p.leaseDuration
}

// nextDeath is the earliest time at which a peer alive now would count
// dead, if it is not renewed meanwhile.
func (p *peers) nextDeath() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	var next time.Time
	for _, r := range p.seen {
		if at := r.observed.Add(p.leaseDuration); at.After(now) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next, !next.IsZero()
}

// seenAlive reports whether this replica has seen the peer's Lease, not
// deleted, renewed within a lease duration: alive by what it saw, not by
// the benefit of the doubt alive gives a replica never seen.
func (p *peers) seenAlive(id string) bool {
	p.mu.Lock()
	r := p.seen[id]
	seen := r != nil && !r.gone
	p.mu.Unlock()
	return seen && p.alive(id)
}

// live lists the replicas that are alive and not draining: those the
// leader assigns members to.
func (p *peers) live() []string {
	p.mu.Lock()
	ids := make([]string, 0, len(p.seen))
	for id, r := range p.seen {
		if !r.draining && !r.gone {
			ids = append(ids, id)
		}
	}
	p.mu.Unlock()
	out := ids[:0]
	for _, id := range ids {
		if p.alive(id) {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// deadLease is a peer Lease as last seen, for the leader to delete.
type deadLease struct{ name, resourceVersion string }

// forgetDead drops the records of replicas dead for long, and returns
// their Leases as last seen, for the leader to delete.
func (p *peers) forgetDead(after time.Duration) []deadLease {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []deadLease
	for id, r := range p.seen {
		if p.now().Sub(r.observed) > after {
			delete(p.seen, id)
			if !r.gone && r.resourceVersion != "" {
				out = append(out, deadLease{r.leaseName, r.resourceVersion})
			}
		}
	}
	return out
}
