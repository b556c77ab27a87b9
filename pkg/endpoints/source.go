package endpoints

import (
	"slices"
	"strings"
	"unique"

	corev1 "k8s.io/api/core/v1"
)

// Source is one exported member Service with its member EndpointSlices.
type Source struct {
	// Cluster is the member cluster's name, a DNS label.
	Cluster string
	// Service is the member Service; never nil and read-only (it comes from an
	// informer cache).
	Service *corev1.Service
	// Slices are the projections of the member's EndpointSlices of
	// Service (see ProjectSlice); read-only.
	Slices []*MemberSlice
	// Record is the export record (see ExportRecord) every hub slice of the
	// source carries; empty for none.
	Record string
}

// ipSlices returns the IPv4 and IPv6 slices of s sorted by name, so that any
// choice made while walking them does not depend on informer order. FQDN
// slices are never aggregated.
func (s Source) ipSlices() []*MemberSlice {
	out := make([]*MemberSlice, 0, len(s.Slices))
	for _, sl := range s.Slices {
		if sl != nil && sl.isIP() {
			out = append(out, sl)
		}
	}
	slices.SortFunc(out, func(a, b *MemberSlice) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// MarkNotReady returns a copy of src whose endpoints are all not ready, as
// the hub shows a member that stopped answering: serving and terminating
// keep their last-known values, so the data plane can still fall back.
func MarkNotReady(src Source) Source {
	out := src
	out.Slices = make([]*MemberSlice, len(src.Slices))
	marked := map[unique.Handle[attributes]]unique.Handle[attributes]{}
	for i, s := range src.Slices {
		if s == nil {
			continue
		}
		c := *s // the rest is read-only, so shared
		c.Endpoints = slices.Clone(s.Endpoints)
		for j := range c.Endpoints {
			c.Endpoints[j].markNotReady(marked)
		}
		out.Slices[i] = &c
	}
	return out
}
