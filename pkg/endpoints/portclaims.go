package endpoints

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// PortClaims is what a member sync reads of its service's merged import:
// the import's ports while it reports a Conflict, none otherwise. KEP-1645
// gives a port name to the oldest export that has it; the data plane pairs
// the derived Service's ports with slice ports by name, so a slice port of
// an export that lost the name would take the winner's traffic. Only an
// import in conflict can hold a port that an export lost: a difference
// without one is an import not yet merged since the member changed, and
// that member's changed export record queues the merge.
type PortClaims []mcsv1beta1.ServicePort

// ImportPortClaims returns the port claims of imp, one of ours or nil.
func ImportPortClaims(imp *mcsv1beta1.ServiceImport) PortClaims {
	if imp == nil || !meta.IsStatusConditionTrue(imp.Status.Conditions, ConditionConflict) {
		return nil
	}
	return imp.Spec.Ports
}

// Equal reports whether c and o claim the same ports, in the same order
// (the merge sorts them by name).
func (c PortClaims) Equal(o PortClaims) bool {
	if len(c) != len(o) {
		return false
	}
	for i := range c {
		if !samePort(c[i], o[i]) || c[i].Name != o[i].Name {
			return false
		}
	}
	return true
}

// Lost returns the names of svc's ports that c gives to another port, a
// port with the same name and another number, protocol or appProtocol;
// nil when there are none.
func (c PortClaims) Lost(svc *corev1.Service) map[string]bool {
	if len(c) == 0 || svc == nil {
		return nil
	}
	var lost map[string]bool
	for _, sp := range svc.Spec.Ports {
		for _, claim := range c {
			if claim.Name != sp.Name {
				continue
			}
			mine := mcsv1beta1.ServicePort{Port: sp.Port, Protocol: protocolOrTCP(sp.Protocol), AppProtocol: sp.AppProtocol}
			if !samePort(claim, mine) {
				if lost == nil {
					lost = map[string]bool{}
				}
				lost[sp.Name] = true
			}
			break
		}
	}
	return lost
}

// samePort reports whether a and b are one port, names aside.
func samePort(a, b mcsv1beta1.ServicePort) bool {
	return a.Port == b.Port && protocolOrTCP(a.Protocol) == protocolOrTCP(b.Protocol) && ptr.Equal(a.AppProtocol, b.AppProtocol)
}

// withoutPorts returns src with the slice ports named in lost left out. The
// slices of src are shared with the member's cache, so the ones it changes
// are copies.
func withoutPorts(src Source, lost map[string]bool) Source {
	out := src
	out.Slices = make([]*MemberSlice, len(src.Slices))
	for i, s := range src.Slices {
		out.Slices[i] = s
		if s == nil {
			continue
		}
		keep := make([]discoveryv1.EndpointPort, 0, len(s.Ports))
		for _, p := range s.Ports {
			if !lost[ptr.Deref(p.Name, "")] {
				keep = append(keep, p)
			}
		}
		if len(keep) != len(s.Ports) {
			c := *s
			c.Ports = keep
			out.Slices[i] = &c
		}
	}
	return out
}
