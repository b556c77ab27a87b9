package sync

import (
	"fmt"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/klog/v2"
)

// serviceRanges are the hub's Service IP ranges, which no member endpoint
// may be in: a member must never point ClusterSet traffic at a hub
// ClusterIP, the kubernetes Service above all. They are fixed by an option
// (for a hub that serves no ServiceCIDRs), and read from the hub's
// ServiceCIDRs when they are watched.
type serviceRanges struct {
	fixed  []netip.Prefix
	lister networkinglisters.ServiceCIDRLister // nil: fixed
}

// get returns the ranges now. A ServiceCIDR being deleted still counts:
// its addresses may be allocated until it is gone. A CIDR the hub's API
// server accepted but this process cannot parse is logged and skipped.
func (s serviceRanges) get() []netip.Prefix {
	if s.lister == nil {
		return s.fixed
	}
	list, err := s.lister.List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("listing the hub's ServiceCIDRs: %w", err))
	}
	out := slices.Clone(s.fixed)
	for _, sc := range list {
		for _, cidr := range sc.Spec.CIDRs {
			p, err := netip.ParsePrefix(cidr)
			if err != nil {
				klog.ErrorS(err, "Unreadable hub ServiceCIDR", "serviceCIDR", sc.Name, "cidr", cidr)
				continue
			}
			out = append(out, p.Masked())
		}
	}
	return out
}
