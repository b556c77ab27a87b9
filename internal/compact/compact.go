// Package compact makes cached objects share the values their fields repeat.
package compact

import (
	stdsync "sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// EndpointSlice makes a cached EndpointSlice share what its endpoints repeat: the
// condition booleans point to shared values, and node and zone names point to
// one interned string each. It changes no value, only where values live;
// the slice must be treated as read-only afterwards, as every cached
// object is. Informer transforms call it, so the members' and the hub's
// caches hold one endpoint in about two thirds of the memory.
func EndpointSlice(s *discoveryv1.EndpointSlice) {
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
// thousands; past the bound (a member inventing names) nothing is shared.
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
		return p
	}
	t.m[*p] = p
	return p
}

// Endpoints makes a cached Endpoints share its addresses' node names.
func Endpoints(e *corev1.Endpoints) {
	for i := range e.Subsets {
		for _, as := range [][]corev1.EndpointAddress{e.Subsets[i].Addresses, e.Subsets[i].NotReadyAddresses} {
			for j := range as {
				as[j].NodeName = names.intern(as[j].NodeName)
			}
		}
	}
}
