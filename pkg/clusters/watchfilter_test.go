package clusters

import (
	"bytes"
	"runtime/pprof"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// filterLoops counts the goroutines of filterWatch.
func filterLoops(t *testing.T) int {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 2); err != nil {
		t.Fatal(err)
	}
	return bytes.Count(buf.Bytes(), []byte("clusters.(*filteredWatch).loop"))
}

// A filtered watch stopped by a reader that no longer reads, with an event
// waiting to be taken, ends its goroutine (watch.Filter's would block
// forever, holding the event).
func TestFilterWatchEndsWhenStoppedWithAnEventPending(t *testing.T) {
	before := filterLoops(t)
	incoming := watch.NewFakeWithChanSize(2, false)
	seen := make(chan struct{}, 2)
	w := filterWatch(incoming, func(ev watch.Event) (watch.Event, bool) {
		seen <- struct{}{}
		return ev, true
	})
	incoming.Add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "a"}})
	incoming.Add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "b"}})
	if ev := <-w.ResultChan(); ev.Object.(*corev1.Service).Name != "a" {
		t.Fatalf("first event %v", ev)
	}
	<-seen
	<-seen // b is filtered and waits to be taken: nobody takes it
	if n := filterLoops(t) - before; n != 1 {
		t.Fatalf("%d filter goroutines running, want 1", n)
	}
	w.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for filterLoops(t) > before {
		if time.Now().After(deadline) {
			t.Fatal("the filter's goroutine still runs after Stop")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
