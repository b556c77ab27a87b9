package sync

import (
	"fmt"
	"testing"
)

// BenchmarkLanes queues 250 members × 1000 services in bulk, as a startup
// sweep does, moves every tenth key to the live lane with a live add, adds
// every key once more in bulk (a Touch that changes nothing), and pops them
// all. One op is that whole cycle; ns/key is per queued key.
func BenchmarkLanes(b *testing.B) {
	const origins, perOrigin = 250, 1000
	keys := make([]Key, 0, origins*perOrigin)
	for s := range perOrigin {
		for o := range origins {
			keys = append(keys, Key{Cluster: fmt.Sprint("member-", o), Namespace: "shop", Name: fmt.Sprint("svc-", s)})
		}
	}
	l := newLanes()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for _, k := range keys {
			l.mark(k, true, k.Cluster)
			l.Push(k)
		}
		for i := 0; i < len(keys); i += 10 {
			l.mark(keys[i], false, keys[i].Cluster)
			l.Touch(keys[i])
		}
		for _, k := range keys {
			l.mark(k, true, k.Cluster)
			l.Touch(k)
		}
		for l.Len() > 0 {
			l.Pop()
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(keys)), "ns/key")
}
