package sync

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

// Member is the read side of one member cluster, as the controller sees it.
type Member interface {
	// HasSynced reports whether the member's caches hold a full view.
	HasSynced() bool
	ServiceLister() corelisters.ServiceLister
	// EndpointSlices returns the projections of the member's slices of one
	// service (see endpoints.ProjectSlice); read-only.
	EndpointSlices(namespace, service string) ([]*endpoints.MemberSlice, error)
	// ServiceExport returns the member's ServiceExport, or nil.
	ServiceExport(namespace, name string) *mcsv1beta1.ServiceExport
	// ServiceExports lists the member's ServiceExports (none when they
	// are not watched); read-only.
	ServiceExports() ([]*mcsv1beta1.ServiceExport, error)
	// PatchServiceExportConditions replaces the conditions of a member's
	// ServiceExport, provided it is still at the cached resourceVersion.
	PatchServiceExportConditions(ctx context.Context, se *mcsv1beta1.ServiceExport, conditions []metav1.Condition) error
}

// Members is the dynamic set of members.
type Members interface {
	// Lookup returns a member's lifecycle state, and its read side once
	// it is Connected or Synced (nil before). Whether a member is gone is
	// decided by the state, never by a nil read side.
	Lookup(name string) (lifecycle.State, Member)
	// Names lists the registered members, connected or not.
	Names() []string
	// SecretsSynced reports whether the registrations are fully known, so
	// that a name not registered is really gone.
	SecretsSynced() bool
}
