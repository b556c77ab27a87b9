package clusters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// The About API (KEP-2149, sigs.k8s.io/about-api) lets a cluster name itself
// and its ClusterSet with cluster-scoped ClusterProperty objects. The daemon
// reads both properties of each member it connects to: a member registered
// under one name that calls itself another, or that belongs to another
// ClusterSet than the hub's, is refused before any of its objects reach the
// hub, and while the mismatch lasts (ClassIdentityMismatch). A member
// without the properties, or without the API, is taken by its registration.
//
// The properties are read before a member's informers start, then by the
// health probe every identityRecheck, and on every probe while they
// mismatch. A member found mismatching at once never has its objects read:
// its informers wait for a probe that lets it in. One that cannot be read
// then (unreachable, or no RBAC for the properties) starts them as before;
// if it later calls itself another cluster, its probes fail from then on
// and the unreachable policy applies to what it had published.
const (
	// PropertyClusterID names the ClusterProperty that holds a cluster's id.
	PropertyClusterID = "cluster.clusterset.k8s.io"
	// PropertyClusterSet names the ClusterProperty that holds the name of the
	// ClusterSet a cluster belongs to.
	PropertyClusterSet = "clusterset.k8s.io"

	aboutGroup = "about.k8s.io"
	// maxPropertyValue bounds a property value the daemon keeps or quotes:
	// a member's value is untrusted data.
	maxPropertyValue = 253
)

// aboutVersions are the versions of the About API the daemon reads, the
// newest first.
var aboutVersions = []string{"v1beta1", "v1alpha1"}

// Identity is what a cluster says of itself through the About API.
type Identity struct {
	// Served is whether the cluster serves the ClusterProperty API.
	Served bool
	// ClusterID and ClusterSet are the values of PropertyClusterID and
	// PropertyClusterSet; "" for a property the cluster does not have.
	ClusterID, ClusterSet string
}

// errIdentityMismatch marks a member whose About API contradicts its
// registration or the hub's ClusterSet.
var errIdentityMismatch = errors.New("identity mismatch")

// ReadIdentity reads a cluster's id and ClusterSet properties through rc, a
// client of any API group of the cluster (paths are absolute). A cluster
// that serves no version of the API has the zero Identity.
func ReadIdentity(ctx context.Context, rc rest.Interface) (Identity, error) {
	for _, v := range aboutVersions {
		id, err := readIdentityAt(ctx, rc, v)
		if apierrors.IsNotFound(err) {
			continue // this version, or the whole API, is not served
		}
		return id, err
	}
	return Identity{}, nil
}

func readIdentityAt(ctx context.Context, rc rest.Interface, version string) (Identity, error) {
	id := Identity{Served: true}
	for _, p := range []struct {
		name string
		into *string
	}{{PropertyClusterID, &id.ClusterID}, {PropertyClusterSet, &id.ClusterSet}} {
		// A list selecting one name: 404 then means the API is not served,
		// never that the property is missing.
		raw, err := rc.Get().AbsPath("/apis", aboutGroup, version, "clusterproperties").
			Param("fieldSelector", fields.OneTermEqualSelector("metadata.name", p.name).String()).
			DoRaw(ctx)
		if err != nil {
			return Identity{}, err
		}
		var list struct {
			Items []struct {
				Spec struct {
					Value string `json:"value"`
				} `json:"spec"`
			} `json:"items"`
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			return Identity{}, fmt.Errorf("reading ClusterProperty %s: %w", p.name, err)
		}
		if len(list.Items) > 0 {
			*p.into = list.Items[0].Spec.Value
		}
	}
	return id, nil
}

// checkIdentity returns why a cluster that says id of itself may not be the
// member cluster of the ClusterSet clusterSet ("" when the hub names none),
// or nil.
func checkIdentity(cluster, clusterSet string, id Identity) error {
	if id.ClusterID != "" && id.ClusterID != cluster {
		return fmt.Errorf("%w: the member's ClusterProperty %s is %s, but it is registered as %q: a member may not claim another cluster's id",
			errIdentityMismatch, PropertyClusterID, quoteValue(id.ClusterID), cluster)
	}
	if clusterSet != "" && id.ClusterSet != "" && id.ClusterSet != clusterSet {
		return fmt.Errorf("%w: the member's ClusterProperty %s is %s, but the hub's ClusterSet is %q",
			errIdentityMismatch, PropertyClusterSet, quoteValue(id.ClusterSet), clusterSet)
	}
	return nil
}

// quoteValue quotes an untrusted property value, cut to maxPropertyValue.
func quoteValue(v string) string {
	if len(v) > maxPropertyValue {
		return fmt.Sprintf("%q…", v[:maxPropertyValue])
	}
	return fmt.Sprintf("%q", v)
}

// identityRecheck is how often the identity of a member that passed is read
// again; one that failed is read on every probe, so it recovers at once.
const identityRecheck = time.Minute

// identityCheck is a Cluster's record of its member's identity checks.
type identityCheck struct {
	mu      sync.Mutex
	last    time.Time // of the last read of the member's properties, failed or not
	err     error     // the last verdict: errIdentityMismatch, or nil
	id      Identity
	decided chan struct{} // closed at the first verdict that lets the member in
	once    sync.Once
}

func newIdentityCheck() *identityCheck { return &identityCheck{decided: make(chan struct{})} }

// letIn lets the member's informers start, once and for good.
func (ic *identityCheck) letIn() {
	if ic != nil {
		ic.once.Do(func() { close(ic.decided) })
	}
}

// admitted is closed once the member's informers may start; a Cluster
// built without a check (in unit tests) admits at once.
func (ic *identityCheck) admitted() <-chan struct{} {
	if ic == nil {
		return closedChan
	}
	return ic.decided
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// check reads the member's identity when due and returns the verdict: an
// error wrapping errIdentityMismatch while the member contradicts its
// registration. A member that cannot be read, or does not let the daemon
// read the properties, is judged by its registration: reachability is the
// probe's business, and the properties are optional.
func (c *Cluster) checkIdentity(ctx context.Context, clusterSet string) error {
	ic := c.identity
	if ic == nil {
		return nil
	}
	ic.mu.Lock()
	defer ic.mu.Unlock()
	rc := c.clients.Kube.Discovery().RESTClient()
	if rc == nil { // fake clients in unit tests
		ic.letIn()
		return nil
	}
	if ic.err == nil && !ic.last.IsZero() && time.Since(ic.last) < identityRecheck {
		return nil
	}
	id, err := ReadIdentity(ctx, rc)
	ic.last = time.Now() // a failed read too: one that keeps failing (no RBAC for the properties) is tried every identityRecheck, not every probe
	if err != nil {
		klog.V(2).InfoS("Cannot read the member's About API properties; it is judged by its registration", "cluster", c.name, "err", err)
		if ic.err == nil {
			ic.letIn()
		}
		return ic.err // the last verdict stands
	}
	ic.id = id
	ic.err = checkIdentity(c.name, clusterSet, id)
	if ic.err == nil {
		ic.letIn()
	}
	return ic.err
}

// identityTimeout bounds the identity check before a member's informers
// start.
const identityTimeout = 5 * time.Second

// admitByIdentity checks the member's identity before its informers start,
// and reports whether they may: at once unless the member contradicts its
// registration, else once a probe finds it corrected; false when the
// Cluster stops first.
func (c *Cluster) admitByIdentity() bool {
	clusterSet := ""
	if c.clusterSet != nil {
		clusterSet = c.clusterSet()
	}
	parent := c.ctx
	if parent == nil { // a Cluster built by hand in a unit test
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, identityTimeout)
	err := c.checkIdentity(ctx, clusterSet)
	cancel()
	if err == nil {
		return true
	}
	select {
	case <-c.identity.admitted():
		return true
	case <-c.stop:
		return false
	}
}

// Identity returns what the member said of itself at the last check.
func (c *Cluster) Identity() Identity {
	if c.identity == nil {
		return Identity{}
	}
	c.identity.mu.Lock()
	defer c.identity.mu.Unlock()
	return c.identity.id
}
