package clusters

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A reader of a member's health never sees an outage dated from an earlier
// one: once a recovery has been reported, the since of the outage before it
// is never read as current. The probe flaps as fast as it can while a
// reader reads; the check runs afterwards on what each saw.
func TestHealthIsNeverReadTorn(t *testing.T) {
	kube := kubefake.NewClientset()
	var probes atomic.Int64
	kube.PrependReactor("get", "version", func(k8stesting.Action) (bool, runtime.Object, error) {
		// Two failures, then a success: every third probe recovers.
		if probes.Add(1)%3 != 0 {
			return true, nil, errors.New("refused")
		}
		return false, nil, nil
	})
	c, err := newCluster("east", "h", "", Clients{Kube: kube}, EventHandlers{}, ReadBounds{})
	if err != nil {
		t.Fatal(err)
	}
	c.synced.Store(true)

	// recoveredAt[since] is when the recovery that ended the outage dated
	// since was reported (after it was stored).
	var mu sync.Mutex
	recoveredAt := map[time.Time]time.Time{}
	var current time.Time
	go c.probeLoop(time.Microsecond, time.Second, func(healthy bool) {
		mu.Lock()
		defer mu.Unlock()
		if healthy {
			recoveredAt[current] = time.Now()
			return
		}
		current, _ = c.UnreachableSince()
	})
	defer c.shutdown()

	type read struct {
		before time.Time
		since  time.Time
	}
	var reads []read
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		before := time.Now()
		if since, down := c.UnreachableSince(); down {
			reads = append(reads, read{before, since})
		}
	}
	c.shutdown()
	mu.Lock()
	defer mu.Unlock()
	if len(recoveredAt) < 100 {
		t.Fatalf("only %d recoveries in a second: the probe did not flap", len(recoveredAt))
	}
	torn := 0
	for _, r := range reads {
		if at, ok := recoveredAt[r.since]; ok && r.before.After(at) {
			torn++
		}
	}
	if torn > 0 {
		t.Errorf("%d of %d reads saw an outage dated from one whose recovery was reported before the read", torn, len(reads))
	}
}

// A registration's overrides are read one by one: what cannot be read says
// what applies instead, and an unreadable list of allowed CIDRs allows
// nothing rather than everything.
func TestParsePolicyOverride(t *testing.T) {
	p, err := ParsePolicyOverride(map[string]string{
		AnnotationUnreachableGrace:     "90s",
		AnnotationAllowedEndpointCIDRs: "10.1.0.0/16, fd00:1::/64",
	})
	if err != nil || p.Grace == nil || *p.Grace != 90*time.Second || p.Withdraw != nil || len(p.AllowedEndpoints) != 2 {
		t.Fatalf("ParsePolicyOverride = %+v, %v; want grace 90s and two allowed ranges", p, err)
	}
	if p, err := ParsePolicyOverride(nil); err != nil || p.AllowedEndpoints != nil {
		t.Errorf("no annotations: %+v, %v; want no allowed list", p, err)
	}
	p, err = ParsePolicyOverride(map[string]string{
		AnnotationUnreachableWithdraw:  "soon",
		AnnotationUnreachableGrace:     "1m",
		AnnotationAllowedEndpointCIDRs: "10.1.0.1/16",
	})
	if err == nil || !strings.Contains(err.Error(), AnnotationUnreachableWithdraw) || !strings.Contains(err.Error(), "refused until it is fixed") {
		t.Errorf("error %v, want both broken annotations named", err)
	}
	if p.Grace == nil || *p.Grace != time.Minute || p.Withdraw != nil {
		t.Errorf("the readable grace was lost: %+v", p)
	}
	if p.AllowedEndpoints == nil || len(p.AllowedEndpoints) != 0 {
		t.Errorf("an unreadable allowed list gave %v, want an empty, non-nil list (nothing allowed)", p.AllowedEndpoints)
	}
}
