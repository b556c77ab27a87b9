package app

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// explain shows a member's failing sync from the newest of its SyncFailed
// and SyncRecovered Events, and only its own.
func TestFailingSyncsTakesTheNewestWordPerCluster(t *testing.T) {
	at := func(sec int64, reason, msg string) corev1.Event {
		return corev1.Event{Reason: reason, Message: msg, LastTimestamp: metav1.NewTime(time.Unix(sec, 0))}
	}
	got := failingSyncs([]corev1.Event{
		at(10, easync.ReasonSyncFailed, "cluster east: writing its hub objects of shop/cart fails, retrying: old"),
		at(20, easync.ReasonSyncFailed, "cluster east: writing its hub objects of shop/cart fails, retrying: new"),
		at(10, easync.ReasonSyncFailed, "cluster west: writing its hub objects of shop/cart fails, retrying: x"),
		at(30, easync.ReasonSyncRecovered, "cluster west: writing its hub objects of shop/cart succeeds again"),
		at(40, easync.ReasonSyncFailed, "merging shop/cart fails, retrying: y"),
		at(50, "EndpointsRefused", "cluster north: 1 endpoint(s) of its export refused"),
	})
	if len(got) != 1 || got["east"] != "cluster east: writing its hub objects of shop/cart fails, retrying: new" {
		t.Errorf("failing syncs %q, want east's newest only", got)
	}
}
