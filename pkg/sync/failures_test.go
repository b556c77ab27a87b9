package sync

import (
	"errors"
	"testing"
	"time"
)

// A key's failure is said loud when new, when its message changes, and
// again after failureRepeat; a sync that succeeds resets it.
func TestFailuresAreSaidLoudOncePerCause(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newFailureLog(func() time.Time { return now })
	k := Key{Cluster: "c1", Namespace: "shop", Name: "cart"}
	refused := errors.New(`EndpointSlice "x" is invalid: metadata.annotations: Too long`)
	steps := []struct {
		advance time.Duration
		err     error
		forget  bool
		loud    bool
	}{
		{0, refused, false, true},
		{time.Second, refused, false, false},
		{time.Minute, refused, false, false},
		{0, errors.New("conflict"), false, true},
		{0, refused, false, true},
		{failureRepeat, refused, false, true},
		{time.Second, refused, true, true}, // synced in between: new again
	}
	for i, s := range steps {
		now = now.Add(s.advance)
		if s.forget {
			l.forget(k)
		}
		if got := l.loud(k, s.err); got != s.loud {
			t.Errorf("step %d (%v): loud %v, want %v", i, s.err, got, s.loud)
		}
	}
	if l.loud(Key{Cluster: "c2", Namespace: "shop", Name: "cart"}, refused) != true {
		t.Error("another key's first failure was not said")
	}
}
