package clusters

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ErrorClass is the cause of a member failure, as an operator acts on it:
// the suffix of the Event reason (Member<Class>), the reason a member Lease
// publishes, and, in snake case, the reason label of
// endpoint_aggregator_member_cluster_error.
type ErrorClass string

const (
	// ClassUnauthorized: the member rejects the credentials (401): a
	// revoked or expired token, a client certificate it does not trust.
	ClassUnauthorized ErrorClass = "Unauthorized"
	// ClassForbidden: the credentials are accepted but lack a permission
	// (403): the member's RBAC for the daemon is missing or narrowed.
	ClassForbidden ErrorClass = "Forbidden"
	// ClassTLS: the TLS handshake or the certificate check failed (unknown
	// CA, wrong host name, plain HTTP on an https URL).
	ClassTLS ErrorClass = "TLSError"
	// ClassConnectionRefused: nothing listens at the server's address.
	ClassConnectionRefused ErrorClass = "ConnectionRefused"
	// ClassTimeout: no answer in time: a hung API server or a partition.
	ClassTimeout ErrorClass = "Timeout"
	// ClassDNS: the server's host name does not resolve.
	ClassDNS ErrorClass = "DNSError"
	// ClassNotAPIServer: something answers, but not a Kubernetes API server
	// (HTML, or 404 on a path every API server serves): a wrong URL.
	ClassNotAPIServer ErrorClass = "NotAPIServer"
	// ClassNotFound: the API server does not serve a watched resource (the
	// ServiceExport CRD is not installed in the member, say).
	ClassNotFound ErrorClass = "ResourceNotFound"
	// ClassUnhealthy: the API server answers that it is not ready (5xx), or
	// the cluster manager reports its control plane unhealthy.
	ClassUnhealthy ErrorClass = "Unhealthy"
	// ClassInvalidRegistration: the registration cannot be turned into a
	// connection (its own Event, e.g. KubeconfigRefused, says why).
	ClassInvalidRegistration ErrorClass = "InvalidRegistration"
	// ClassIdentityMismatch: the member's About API ClusterProperties name
	// another cluster than its registration, or another ClusterSet than
	// the hub's (about.go).
	ClassIdentityMismatch ErrorClass = "IdentityMismatch"
	// ClassOverBounds: the member holds more Services or endpoints than
	// the daemon reads of one member (ReadBounds).
	ClassOverBounds ErrorClass = "OverBounds"
	// ClassOther: anything else; the message says what.
	ClassOther ErrorClass = "Other"
)

// errNotAPIServer marks a probe answer no API server gives; errReported
// marks a probe failed because the cluster manager reports the member's
// control plane unhealthy.
var (
	errNotAPIServer = errors.New("not a Kubernetes API server")
	errReported     = errors.New("reported unhealthy")
)

// Classify returns the class of a member error; "" for nil. It looks through
// wrapped errors (url.Error, StatusError, net.OpError).
func Classify(err error) ErrorClass {
	if err == nil {
		return ""
	}
	var (
		dnsErr   *net.DNSError
		netErr   net.Error
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		header   tls.RecordHeaderError
		alert    tls.AlertError
	)
	switch {
	case errors.Is(err, errReported):
		return ClassUnhealthy
	case errors.Is(err, errNotAPIServer):
		return ClassNotAPIServer
	case errors.Is(err, errIdentityMismatch):
		return ClassIdentityMismatch
	case errors.Is(err, errOverBounds):
		return ClassOverBounds
	case apierrors.IsUnauthorized(err):
		return ClassUnauthorized
	case apierrors.IsForbidden(err):
		return ClassForbidden
	case apierrors.IsUnexpectedServerError(err) && looksLikeHTML(err):
		return ClassNotAPIServer
	// A 200 with a body no decoder reads (client-go's unexported error).
	case strings.Contains(err.Error(), "serializer for text/html doesn't exist"):
		return ClassNotAPIServer
	case apierrors.IsNotFound(err):
		return ClassNotFound
	case apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err):
		return ClassTimeout
	case isServerError(err):
		return ClassUnhealthy
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &hostname), errors.As(err, &invalid),
		errors.As(err, &header), errors.As(err, &alert),
		strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return ClassTLS
	case errors.As(err, &dnsErr):
		return ClassDNS
	case errors.Is(err, syscall.ECONNREFUSED):
		return ClassConnectionRefused
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return ClassTimeout
	}
	return ClassOther
}

// looksLikeHTML reports whether an unexpected server response was a page.
func looksLikeHTML(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if strings.HasPrefix(strings.TrimSpace(c.Message), "<") {
			return true
		}
	}
	return false
}

// isServerError reports a 5xx answer.
func isServerError(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status) && status.Status().Code >= 500
}

// Reason is the Event reason of a member failing for this cause. Other
// keeps the reason member failures had before they were classified.
func (c ErrorClass) Reason() string {
	if c == ClassOther || c == "" {
		return ReasonUnreachable
	}
	return "Member" + string(c)
}

// Label is the class as a metric label value: snake case.
func (c ErrorClass) Label() string {
	return snakeCase(string(c))
}

// Hint says in a few words what the class usually means.
func (c ErrorClass) Hint() string {
	switch c {
	case ClassUnauthorized:
		return "the member rejects the daemon's credentials (revoked or expired token?)"
	case ClassForbidden:
		return "the daemon's identity lacks RBAC permissions in the member"
	case ClassTLS:
		return "TLS handshake or certificate verification failed (wrong CA data or server name?)"
	case ClassConnectionRefused:
		return "nothing listens at the member's server address (API server down, wrong port?)"
	case ClassTimeout:
		return "the member does not answer in time (hung API server or network partition?)"
	case ClassDNS:
		return "the member's server name does not resolve"
	case ClassNotAPIServer:
		return "the server is not a Kubernetes API server (wrong URL?)"
	case ClassNotFound:
		return "the member does not serve a watched resource (ServiceExport CRD not installed?)"
	case ClassUnhealthy:
		return "the member's API server reports itself unhealthy"
	case ClassInvalidRegistration:
		return "the registration cannot be turned into a connection"
	case ClassIdentityMismatch:
		return "the member's About API ClusterProperty contradicts its registration or the hub's ClusterSet"
	case ClassOverBounds:
		return "the member holds more Services or endpoints than the daemon reads of one member (--max-member-read-services, --max-member-read-endpoints)"
	}
	return "unclassified error"
}

// ClassOfReason returns the class whose Reason is reason, if any.
func ClassOfReason(reason string) (ErrorClass, bool) {
	for _, c := range errorClasses {
		if c.Reason() == reason {
			return c, true
		}
	}
	return "", false
}

// FailureReasons returns the Event reasons of member failures, one per
// class (MemberUnauthorized, ..., MemberUnreachable for Other).
func FailureReasons() []string {
	out := make([]string, len(errorClasses))
	for i, c := range errorClasses {
		out[i] = c.Reason()
	}
	return out
}

// errorClasses lists every class, for ClassOfReason and documentation.
var errorClasses = []ErrorClass{ClassUnauthorized, ClassForbidden, ClassTLS, ClassConnectionRefused, ClassTimeout,
	ClassDNS, ClassNotAPIServer, ClassNotFound, ClassUnhealthy, ClassInvalidRegistration, ClassIdentityMismatch, ClassOther}

// snakeCase turns "ConnectionRefused" into "connection_refused"; a run of
// capitals is one word ("TLSError" → "tls_error").
func snakeCase(s string) string {
	var b strings.Builder
	r := []rune(s)
	for i, c := range r {
		upper := c >= 'A' && c <= 'Z'
		if upper && i > 0 {
			prevLower := r[i-1] >= 'a' && r[i-1] <= 'z'
			nextLower := i+1 < len(r) && r[i+1] >= 'a' && r[i+1] <= 'z'
			prevUpper := r[i-1] >= 'A' && r[i-1] <= 'Z'
			if prevLower || (prevUpper && nextLower) {
				b.WriteByte('_')
			}
		}
		if upper {
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	return b.String()
}
