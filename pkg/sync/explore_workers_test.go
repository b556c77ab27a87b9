package sync

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// faultInterleave counts syncs started while another worker of the same
// replica was in the middle of one.
const faultInterleave = "workers' syncs interleaved"

// simWorker is one worker of a replica: a goroutine that runs one sync at
// a time, parked before each of its API calls until the world resumes it.
// Only the world or one worker runs at any moment, so a seed replays.
type simWorker struct {
	r      *replica
	name   string
	resume chan struct{}
	back   chan bool // true: parked before a call; false: its sync is done
	parked bool
	key    Key // the key of its sync, once it took one
	// until is the deadline of its sync's writes of each member, and
	// mergeUntil of the merged ones, as the sync first saw them (sharded
	// seeds): its context's, which the audit applies on the virtual clock.
	until      map[string]time.Time
	merging    bool
	mergeUntil time.Time
}

// newWorkers starts n workers for r and parks its controller's API calls.
func (w *world) newWorkers(r *replica, n int) {
	for i := range n {
		sw := &simWorker{r: r, name: fmt.Sprintf("%s/w%d", r.name, i+1), resume: make(chan struct{}), back: make(chan bool)}
		go func() {
			for range sw.resume {
				sw.r.ctrl.processNext(w.ctx)
				sw.back <- false
			}
		}()
		r.workers = append(r.workers, sw)
	}
	r.ctrl.write.beforeCall = w.yield
	getService, getImport := r.ctrl.read.getService, r.ctrl.read.getImport
	r.ctrl.read.getService = func(ctx context.Context, ns, name string) (*corev1.Service, error) {
		w.yield()
		return getService(ctx, ns, name)
	}
	r.ctrl.read.getImport = func(ctx context.Context, ns, name string) (*mcsv1beta1.ServiceImport, error) {
		w.yield()
		return getImport(ctx, ns, name)
	}
}

// yield parks the running worker before an API call, until the world
// resumes it; on the world's own goroutine it does nothing.
func (w *world) yield() {
	sw := w.current
	if sw == nil {
		return
	}
	sw.back <- true
	<-sw.resume
}

// runWorker lets a worker run until its next API call or the end of its
// sync.
func (w *world) runWorker(sw *simWorker) {
	starting := !sw.parked
	if starting {
		sw.until, sw.merging, sw.mergeUntil = map[string]time.Time{}, false, time.Time{}
	}
	w.current = sw
	sw.resume <- struct{}{}
	sw.parked = <-sw.back
	w.current = nil
	if starting {
		sw.key = sw.r.queue.last
	}
	if !sw.parked {
		w.log("%s: sync %s done", sw.name, sw.key)
		if k := sw.key; k.IsClusterSet() && sw.r.ctrl.waits.of[k].Has(waitSourcesSwept(k)) {
			w.tally[exploreSweepWait]++
		}
	}
}

// workerSteps are the steps of r's workers: a parked one goes on; an idle
// one takes a key when one is queued.
func (w *world) workerSteps(r *replica) []step {
	if r.sh != nil && r.sh.paused {
		return nil
	}
	var out []step
	busy := 0
	for _, sw := range r.workers {
		if sw.parked {
			busy++
		}
	}
	for _, sw := range r.workers {
		switch {
		case sw.parked:
			out = append(out, step{"sync", func() { w.runWorker(sw) }})
		case r.queue.Len() > 0:
			// Syncs are the bulk of the work: weigh them up.
			s := step{"sync", func() {
				if busy > 0 {
					w.tally[faultInterleave]++
				}
				w.runWorker(sw)
			}}
			out = append(out, s, s, s)
		}
	}
	return out
}

// drainWorkers lets r's parked workers finish their syncs, as a replica
// that stops waits for its in-flight writes.
func (w *world) drainWorkers(r *replica) {
	for _, sw := range r.workers {
		for sw.parked {
			w.runWorker(sw)
		}
	}
}

// parkedWorkers counts the workers in the middle of a sync, in every
// replica.
func (w *world) parkedWorkers() int {
	n := 0
	for _, r := range w.replicaList() {
		for _, sw := range r.workers {
			if sw.parked {
				n++
			}
		}
	}
	return n
}

// stopWorkers ends the idle workers' goroutines once a run is over.
func (w *world) stopWorkers() {
	if w.shard != nil {
		w.stopShard()
	}
	for _, r := range w.replicaList() {
		for _, sw := range r.workers {
			if !sw.parked {
				close(sw.resume)
			}
		}
	}
}
