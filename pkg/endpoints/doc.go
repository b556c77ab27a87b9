// Package endpoints computes the hub objects endpoint-aggregator writes from
// the Services and EndpointSlices it reads in member clusters.
//
// For every exported member Service it derives:
//
//   - hub EndpointSlices for the multi-cluster Service (see PlanSlices), one
//     set per member cluster, labelled so that kube-proxy attaches them to the
//     derived Service of the ServiceImport;
//   - optionally a per-cluster Service and Endpoints pair (see
//     PerClusterService and PerClusterEndpoints) that addresses only that
//     member's endpoints;
//   - its contribution to the ServiceImport (see MergeImport) and the derived
//     Service that backs it (see DerivedService).
//
// Member EndpointSlices come in as projections (MemberSlice, built by
// ProjectSlice in the member informers' transform): the planners see only
// what the hub carries. The hub objects they plan are API objects.
//
// The package is pure: it depends on API types only, never on a client. Its
// inputs usually come from informer caches, so no function mutates its
// arguments and no returned object shares memory with them, except the
// digests (DigestSlice, DigestEndpoints), which an informer transform
// builds from objects it then drops, and projections, which are read-only
// and which Sanitize and MarkNotReady share in what they return. The
// UpToDate and Merge helpers compare and apply only the fields this package
// owns, so that fields defaulted or allocated by the API server never cause
// writes.
package endpoints
