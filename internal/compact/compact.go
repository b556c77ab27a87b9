// Package compact makes cached objects share the values their fields repeat.
package compact

import (
	stdsync "sync"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// EndpointSlice makes a cached EndpointSlice share what its endpoints repeat:
// the condition booleans point to shared values, and node and zone names
// point to one interned string each. The endpoints move to an array of their
// exact length (decoding grows it by doubling). It changes no value, only
// where values live; the slice must be treated as read-only afterwards, as
// every cached object is. The member informers' transform calls it.
func EndpointSlice(s *discoveryv1.EndpointSlice) {
	if cap(s.Endpoints) > len(s.Endpoints) {
		exact := make([]discoveryv1.Endpoint, len(s.Endpoints))
		copy(exact, s.Endpoints)
		s.Endpoints = exact
	}
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		ep.Conditions.Ready = sharedBool(ep.Conditions.Ready)
		ep.Conditions.Serving = sharedBool(ep.Conditions.Serving)
		ep.Conditions.Terminating = sharedBool(ep.Conditions.Terminating)
		ep.NodeName = names.intern(ep.NodeName)
		ep.Zone = names.intern(ep.Zone)
	}
}

var boolValues = [2]bool{false, true}

func sharedBool(p *bool) *bool {
	if p == nil {
		return nil
	}
	if *p {
		return &boolValues[1]
	}
	return &boolValues[0]
}

// maxInterned bounds the interned names: node and zone names number in the
// thousands. Past the bound (nodes come and go for weeks, or a member
// invents names) the table starts afresh; names already shared stay valid.
const maxInterned = 1 << 16

type internTable struct {
	mu stdsync.RWMutex
	m  map[string]*string
}

var names = internTable{m: map[string]*string{}}

func (t *internTable) intern(p *string) *string {
	if p == nil {
		return nil
	}
	t.mu.RLock()
	q, ok := t.m[*p]
	t.mu.RUnlock()
	if ok {
		return q
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if q, ok := t.m[*p]; ok {
		return q
	}
	if len(t.m) >= maxInterned {
		clear(t.m)
	}
	t.m[*p] = p
	return p
}
