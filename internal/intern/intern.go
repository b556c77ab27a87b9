// Package intern makes cached objects share the values their fields repeat.
package intern

import (
	"encoding/binary"
	stdsync "sync"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// Ports returns a slice equal to ports, shared with every other caller that
// passed equal ports: the slices of a member's services repeat a few port
// sets many times. The result must be treated as read-only. Equal means the
// same fields set to the same values, in the same order; nil and empty both
// return nil.
func Ports(ports []discoveryv1.EndpointPort) []discoveryv1.EndpointPort {
	if len(ports) == 0 {
		return nil
	}
	key := portsKey(ports)
	portSets.mu.RLock()
	shared, ok := portSets.m[key]
	portSets.mu.RUnlock()
	if ok {
		return shared
	}
	own := make([]discoveryv1.EndpointPort, len(ports))
	for i := range ports {
		ports[i].DeepCopyInto(&own[i])
	}
	portSets.mu.Lock()
	defer portSets.mu.Unlock()
	if shared, ok := portSets.m[key]; ok {
		return shared
	}
	if len(portSets.m) >= maxInterned {
		clear(portSets.m)
	}
	portSets.m[key] = own
	return own
}

// portsKey encodes every field of ports, each with its presence and length,
// so that different ports never share a key.
func portsKey(ports []discoveryv1.EndpointPort) string {
	b := make([]byte, 0, 32*len(ports))
	str := func(p *string) {
		if p == nil {
			b = append(b, 0)
			return
		}
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(len(*p)))
		b = append(b, *p...)
	}
	for _, p := range ports {
		str(p.Name)
		if p.Port == nil {
			b = append(b, 0)
		} else {
			b = append(b, 1)
			b = binary.AppendVarint(b, int64(*p.Port))
		}
		if p.Protocol == nil {
			str(nil)
		} else {
			s := string(*p.Protocol)
			str(&s)
		}
		str(p.AppProtocol)
	}
	return string(b)
}

// maxInterned bounds the interned port sets: a member has a few hundred.
// Past the bound (services come and go for weeks, or a member invents
// ports) the table starts afresh; sets already shared stay valid.
const maxInterned = 1 << 14

var portSets = struct {
	mu stdsync.RWMutex
	m  map[string][]discoveryv1.EndpointPort
}{m: map[string][]discoveryv1.EndpointPort{}}
