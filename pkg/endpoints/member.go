package endpoints

import (
	"net/netip"
	"slices"
	"time"
	"unique"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/intern"
)

// The member informers cache a projection of each EndpointSlice (see
// ProjectSlice) instead of the object: per endpoint only what the hub
// carries, in a fixed small layout whose names are shared. The planners
// read the projection, so they cannot depend on a field the cache dropped.

// MemberSlice is what the daemon keeps in memory of a member EndpointSlice.
// It is read-only once built, as every cached object is.
type MemberSlice struct {
	metav1.TypeMeta
	// ObjectMeta holds the name, namespace, resourceVersion and, as the only
	// label, kubernetes.io/service-name.
	metav1.ObjectMeta
	AddressType discoveryv1.AddressType
	// Ports are shared between slices with equal ports (see intern.Ports).
	// None for a slice that is not IPv4 or IPv6.
	Ports []discoveryv1.EndpointPort
	// Endpoints are the member's endpoints the hub could take, in the
	// member's order. None for a slice that is not IPv4 or IPv6.
	Endpoints []MemberEndpoint
	// Invalid are the member's endpoints the hub's API server would reject,
	// in the member's order; Sanitize refuses them.
	Invalid []InvalidEndpoint
	// LastChange is the slice's last-change-trigger-time annotation; zero
	// when it has none or it does not parse.
	LastChange time.Time
}

// MemberEndpoint is one endpoint of a MemberSlice: its first address (the
// one consumers use; the hub carries no other), its names and conditions,
// interned, in 32 bytes.
type MemberEndpoint struct {
	addr     [16]byte              // the address in its 16-byte form
	hostname unique.Handle[string] // zero: unset
	attrs    unique.Handle[attributes]
}

// attributes are what the endpoints of one node in one state share: the
// topology, the conditions and the address's family.
type attributes struct {
	topology
	cond conditions
	is4  bool
}

// topology holds the node name and zone of an endpoint. A member's hints
// are not held: they describe its own nodes, and the hub's are ours.
type topology struct {
	node, zone string
	set        topologySet
}

type topologySet uint8

const (
	nodeSet topologySet = 1 << iota
	zoneSet
)

// conditions packs the three conditions, each unset, true or false.
type conditions uint8

const (
	readySet conditions = 1 << iota
	readyTrue
	servingSet
	servingTrue
	terminatingSet
	terminatingTrue
)

// InvalidEndpoint is a member endpoint the projection could not take.
type InvalidEndpoint struct {
	// Index is the endpoint's position in the member's slice.
	Index int
	// Address is its first address as the member sent it; "" for none.
	Address string
	// Detail says what the hub would reject.
	Detail string
}

// ProjectSlice returns the projection of a member EndpointSlice. It shares
// nothing with s. Endpoints the hub would reject for their own content
// (see checkEndpoint) go to Invalid with why; a slice that is neither IPv4
// nor IPv6 keeps only its metadata, address type and LastChange, as it is
// never aggregated.
func ProjectSlice(s *discoveryv1.EndpointSlice) *MemberSlice {
	out := &MemberSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:            s.Name,
			Namespace:       s.Namespace,
			ResourceVersion: s.ResourceVersion,
		},
		AddressType: s.AddressType,
	}
	if svc, ok := s.Labels[discoveryv1.LabelServiceName]; ok {
		out.Labels = map[string]string{discoveryv1.LabelServiceName: svc}
	}
	if v, ok := s.Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			out.LastChange = t
		}
	}
	if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
		return out
	}
	out.Ports = intern.Ports(s.Ports)
	if len(s.Endpoints) > 0 {
		out.Endpoints = make([]MemberEndpoint, 0, len(s.Endpoints))
	}
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		if why := checkEndpoint(s.AddressType, ep); why != "" {
			out.Invalid = append(out.Invalid, InvalidEndpoint{Index: i, Address: firstAddress(ep), Detail: why})
			continue
		}
		out.Endpoints = append(out.Endpoints, projectEndpoint(ep))
	}
	switch {
	case len(out.Endpoints) == 0:
		out.Endpoints = nil
	case len(out.Endpoints) < cap(out.Endpoints):
		out.Endpoints = slices.Clone(out.Endpoints) // exact length
	}
	return out
}

// projectEndpoint projects a valid endpoint (see checkEndpoint).
func projectEndpoint(ep *discoveryv1.Endpoint) MemberEndpoint {
	a := netip.MustParseAddr(ep.Addresses[0])
	out := MemberEndpoint{addr: a.As16()}
	if ep.Hostname != nil {
		out.hostname = unique.Make(*ep.Hostname)
	}
	t := attributes{is4: a.Is4()}
	if ep.NodeName != nil {
		t.node, t.set = *ep.NodeName, t.set|nodeSet
	}
	if ep.Zone != nil {
		t.zone, t.set = *ep.Zone, t.set|zoneSet
	}
	c := ep.Conditions
	t.cond = packCondition(c.Ready, readySet, readyTrue) |
		packCondition(c.Serving, servingSet, servingTrue) |
		packCondition(c.Terminating, terminatingSet, terminatingTrue)
	out.attrs = unique.Make(t)
	return out
}

func packCondition(p *bool, set, isTrue conditions) conditions {
	switch {
	case p == nil:
		return 0
	case *p:
		return set | isTrue
	}
	return set
}

func (c conditions) get(set, isTrue conditions) *bool {
	if c&set == 0 {
		return nil
	}
	v := c&isTrue != 0
	return &v
}

// Addr returns the endpoint's address.
func (ep *MemberEndpoint) Addr() netip.Addr {
	if ep.attrs.Value().is4 {
		return netip.AddrFrom4([4]byte(ep.addr[12:]))
	}
	return netip.AddrFrom16(ep.addr)
}

func (ep *MemberEndpoint) cond() conditions { return ep.attrs.Value().cond }

// Ready returns the ready condition; nil when unset.
func (ep *MemberEndpoint) Ready() *bool { return ep.cond().get(readySet, readyTrue) }

// Serving returns the serving condition; nil when unset.
func (ep *MemberEndpoint) Serving() *bool { return ep.cond().get(servingSet, servingTrue) }

// Terminating returns the terminating condition; nil when unset.
func (ep *MemberEndpoint) Terminating() *bool { return ep.cond().get(terminatingSet, terminatingTrue) }

// Hostname returns the hostname; nil when unset.
func (ep *MemberEndpoint) Hostname() *string {
	if ep.hostname == (unique.Handle[string]{}) {
		return nil
	}
	v := ep.hostname.Value()
	return &v
}

// hostnameOrEmpty returns the hostname; "" when unset.
func (ep *MemberEndpoint) hostnameOrEmpty() string {
	if ep.hostname == (unique.Handle[string]{}) {
		return ""
	}
	return ep.hostname.Value()
}

// NodeName returns the node name; nil when unset.
func (ep *MemberEndpoint) NodeName() *string {
	t := ep.attrs.Value()
	if t.set&nodeSet == 0 {
		return nil
	}
	v := t.node
	return &v
}

// Zone returns the zone; nil when unset.
func (ep *MemberEndpoint) Zone() *string {
	t := ep.attrs.Value()
	if t.set&zoneSet == 0 {
		return nil
	}
	v := t.zone
	return &v
}

// IsReady interprets an unset ready condition as ready, as the API requires.
func (ep *MemberEndpoint) IsReady() bool { return ep.cond().isReady() }

func (c conditions) isReady() bool { return c&readySet == 0 || c&readyTrue != 0 }

// IsServing falls back to the ready condition when serving is unset.
func (ep *MemberEndpoint) IsServing() bool {
	c := ep.cond()
	if c&servingSet == 0 {
		return c.isReady()
	}
	return c&servingTrue != 0
}

// IsTerminating reports a terminating condition set to true.
func (ep *MemberEndpoint) IsTerminating() bool {
	return ep.cond()&terminatingTrue != 0
}

// markNotReady sets the ready condition to false. marked maps attributes
// already marked to their marked form, so the endpoints of a node cost one
// interning, not one each.
func (ep *MemberEndpoint) markNotReady(marked map[unique.Handle[attributes]]unique.Handle[attributes]) {
	if h, ok := marked[ep.attrs]; ok {
		ep.attrs = h
		return
	}
	a := ep.attrs.Value()
	a.cond = a.cond&^readyTrue | readySet
	h := unique.Make(a)
	marked[ep.attrs] = h
	ep.attrs = h
}

// isIP reports whether s is aggregated at all.
func (s *MemberSlice) isIP() bool {
	return s.AddressType == discoveryv1.AddressTypeIPv4 || s.AddressType == discoveryv1.AddressTypeIPv6
}

// firstAddress is the first address of the member's first endpoint, as it
// sent it; "" for none.
func (s *MemberSlice) firstAddress() string {
	if len(s.Invalid) > 0 && s.Invalid[0].Index == 0 {
		return s.Invalid[0].Address
	}
	if len(s.Endpoints) > 0 {
		return s.Endpoints[0].Addr().String()
	}
	return ""
}

// DeepCopyObject implements runtime.Object.
func (s *MemberSlice) DeepCopyObject() runtime.Object {
	out := *s
	s.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if s.Ports != nil {
		out.Ports = make([]discoveryv1.EndpointPort, len(s.Ports))
		for i := range s.Ports {
			s.Ports[i].DeepCopyInto(&out.Ports[i])
		}
	}
	out.Endpoints = slices.Clone(s.Endpoints)
	out.Invalid = slices.Clone(s.Invalid)
	return &out
}

// checkEndpoint says what the hub's API server would reject in an
// endpoint's own content (its first address, the only one the hub
// carries, and its names); "" for nothing.
func checkEndpoint(at discoveryv1.AddressType, ep *discoveryv1.Endpoint) string {
	if len(ep.Addresses) == 0 {
		return "no address"
	}
	a, err := netip.ParseAddr(ep.Addresses[0])
	if err != nil || a.Zone() != "" || a.String() != ep.Addresses[0] {
		return "not an IP address in canonical form"
	}
	if (at == discoveryv1.AddressTypeIPv4) != a.Is4() {
		return "not an address of the slice's type " + string(at)
	}
	if ep.Hostname != nil && len(validation.IsDNS1123Label(*ep.Hostname)) > 0 {
		return "invalid hostname"
	}
	if ep.NodeName != nil && len(validation.IsDNS1123Subdomain(*ep.NodeName)) > 0 {
		return "invalid node name"
	}
	if ep.Zone != nil && len(validation.IsValidLabelValue(*ep.Zone)) > 0 {
		return "invalid zone"
	}
	return ""
}

func firstAddress(ep *discoveryv1.Endpoint) string {
	if len(ep.Addresses) == 0 {
		return ""
	}
	return ep.Addresses[0]
}
