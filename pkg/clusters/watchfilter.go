package clusters

import (
	"sync"

	"k8s.io/apimachinery/pkg/watch"
)

// filterWatch passes the events of w through f, like watch.Filter, but
// ends when stopped even while an event waits to be taken. watch.Filter's
// goroutine blocks on sending forever once its reader has stopped reading,
// holding the event: a reflector that stops a watch mid-stream (a relist,
// a reconnect) leaked one goroutine and one decoded object each time.
func filterWatch(w watch.Interface, f watch.FilterFunc) watch.Interface {
	fw := &filteredWatch{incoming: w, result: make(chan watch.Event), done: make(chan struct{})}
	go fw.loop(f)
	return fw
}

type filteredWatch struct {
	incoming watch.Interface
	result   chan watch.Event
	done     chan struct{}
	stop     sync.Once
}

func (fw *filteredWatch) ResultChan() <-chan watch.Event { return fw.result }

// Stop stops the incoming watch and the filter's goroutine.
func (fw *filteredWatch) Stop() {
	fw.stop.Do(func() { close(fw.done) })
	fw.incoming.Stop()
}

func (fw *filteredWatch) loop(f watch.FilterFunc) {
	defer close(fw.result)
	in := fw.incoming.ResultChan()
	for {
		select {
		case <-fw.done:
			return
		case ev, ok := <-in:
			if !ok {
				return
			}
			out, keep := f(ev)
			if !keep {
				continue
			}
			select {
			case fw.result <- out:
			case <-fw.done:
				return
			}
		}
	}
}
