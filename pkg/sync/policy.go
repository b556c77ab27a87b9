package sync

import (
	stdsync "sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

// policyTimers holds at most one timer per unreachable member: the moment
// the next step of its unreachable policy (grace, then withdraw) takes
// effect. A new outage, a recovery, a reachable member's sync or its
// removal replaces or stops it, so a member whose health flaps holds one
// timer, not one per flip.
type policyTimers struct {
	clock  Clock
	mu     stdsync.Mutex
	timers map[string]clock.Timer
	// gen is the generation of each member's timer: a timer that fires
	// acts only if it is still the member's latest.
	gen     map[string]uint64
	nextGen uint64
	// steps holds the policy step last applied to each unreachable member;
	// due, when its timer's step takes effect.
	steps map[string]lifecycle.Step
	due   map[string]time.Time
	done  bool
}

func newPolicyTimers(c Clock) *policyTimers {
	return &policyTimers{clock: c, timers: map[string]clock.Timer{}, gen: map[string]uint64{}, steps: map[string]lifecycle.Step{}, due: map[string]time.Time{}}
}

// applied records step as the member's current one and reports whether it
// changed (a member starts at Keep).
func (p *policyTimers) applied(cluster string, step lifecycle.Step) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	changed := p.steps[cluster] != step
	p.steps[cluster] = step
	return changed
}

// set replaces the member's timer with one calling f at when; a zero when
// only stops it.
func (p *policyTimers) set(cluster string, when time.Time, f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.timers[cluster]; ok {
		t.Stop()
		delete(p.timers, cluster)
	}
	delete(p.gen, cluster)
	delete(p.due, cluster)
	if when.IsZero() || p.done {
		return
	}
	p.due[cluster] = when
	p.nextGen++
	gen := p.nextGen
	p.gen[cluster] = gen
	p.timers[cluster] = p.clock.AfterFunc(max(0, when.Sub(p.clock.Now())), func() {
		p.mu.Lock()
		current := !p.done && p.gen[cluster] == gen
		if current {
			delete(p.timers, cluster)
		}
		p.mu.Unlock()
		if current {
			f()
		}
	})
}

// stop stops the member's timer and forgets its step: it answers again, or
// is gone. It reports whether a step other than Keep applied, or was due
// by now: a sync plans the step due when it runs (unreachableStep), which may be
// before the timer for it fired.
func (p *policyTimers) stop(cluster string) bool {
	p.mu.Lock()
	due, timed := p.due[cluster]
	stepped := p.steps[cluster] != lifecycle.Keep || timed && !p.clock.Now().Before(due)
	delete(p.steps, cluster)
	p.mu.Unlock()
	p.set(cluster, time.Time{}, nil)
	return stepped
}

// len is the number of timers set, for tests.
func (p *policyTimers) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.timers)
}

// stopAll stops every timer, for good.
func (p *policyTimers) stopAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = true
	for name, t := range p.timers {
		t.Stop()
		delete(p.timers, name)
	}
	clear(p.gen)
	clear(p.due)
}
