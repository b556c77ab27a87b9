package sync

import (
	"net/http"
	"strings"

	"k8s.io/client-go/transport"
)

// Clients of the hub, as HubRequests labels them.
const (
	// ClientHub is the hub client: informers, aggregated writes,
	// registrations, Events, and the shard and leader Leases.
	ClientHub = "hub"
	// ClientLease writes the member liveness Leases (Options.LeaseClient).
	ClientLease = "lease"
	// ClientAbout reads the hub's About API properties once a minute, and
	// with --hub-is-member may create the hub's cluster id: background
	// reads, apart from the hub client's so that none counts as a sync's.
	ClientAbout = "about"
)

// Request verbs, as HubRequests labels them.
const (
	requestGet              = "get"
	requestList             = "list"
	requestWatch            = "watch"
	requestCreate           = "create"
	requestUpdate           = "update"
	requestPatch            = "patch"
	requestDelete           = "delete"
	requestDeleteCollection = "deletecollection"
	requestOther            = "other"
)

var requestVerbs = []string{requestGet, requestList, requestWatch, requestCreate, requestUpdate,
	requestPatch, requestDelete, requestDeleteCollection, requestOther}

// CountRequests returns a wrapper for rest.Config.Wrap that counts every
// request sent through a client's transport in HubRequests, as client.
// Retries are requests of their own; a request is counted when it is
// sent, whatever comes back.
func (m *Metrics) CountRequests(client string) transport.WrapperFunc {
	byVerb := make(map[string]counter, len(requestVerbs))
	for _, v := range requestVerbs {
		byVerb[v] = m.HubRequests.WithLabelValues(client, v)
	}
	return func(next http.RoundTripper) http.RoundTripper {
		return &countingTransport{next: next, byVerb: byVerb}
	}
}

// counter is the part of a prometheus.Counter countingTransport uses.
type counter interface{ Inc() }

type countingTransport struct {
	next   http.RoundTripper
	byVerb map[string]counter
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.byVerb[requestVerb(req)].Inc()
	return t.next.RoundTrip(req)
}

// WrappedRoundTripper lets client-go reach the transport underneath.
func (t *countingTransport) WrappedRoundTripper() http.RoundTripper { return t.next }

// requestVerb names what a request to the API server does, as the
// server's own verbs do: a GET is a watch with ?watch=true, a list on a
// collection, else a get (discovery and other non-resource paths too).
func requestVerb(req *http.Request) string {
	switch req.Method {
	case http.MethodGet, http.MethodHead:
		switch {
		case isWatch(req.URL.Query().Get("watch")):
			return requestWatch
		case isCollection(req.URL.Path):
			return requestList
		}
		return requestGet
	case http.MethodPost:
		return requestCreate
	case http.MethodPut:
		return requestUpdate
	case http.MethodPatch:
		return requestPatch
	case http.MethodDelete:
		if isCollection(req.URL.Path) {
			return requestDeleteCollection
		}
		return requestDelete
	}
	return requestOther
}

func isWatch(v string) bool { return v == "true" || v == "1" }

// isCollection reports whether path names a collection of resources:
// .../api/v1/<resource>, .../apis/<group>/<version>/<resource>, either
// with namespaces/<namespace>/ before <resource>. Whatever comes before
// "api" or "apis" (a proxy's prefix in the host's URL) is skipped.
func isCollection(path string) bool {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for i, s := range segs {
		var rest []string
		switch {
		case s == "api" && len(segs) > i+1:
			rest = segs[i+2:]
		case s == "apis" && len(segs) > i+2:
			rest = segs[i+3:]
		default:
			continue
		}
		if len(rest) >= 3 && rest[0] == "namespaces" {
			rest = rest[2:]
		}
		return len(rest) == 1
	}
	return false
}
