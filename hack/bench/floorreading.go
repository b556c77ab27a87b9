package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// memberQPS and memberBurst are the daemon's default --member-api-qps and
// --member-api-burst: each member client's own limiter.
const (
	memberQPS   = 20
	memberBurst = 40
)

// readingFloor is the floor that also reads what the daemon must read: a
// cold start that lists each simulated member's Services and
// EndpointSlices through the member proxy (the member's own view), one
// client per member at the daemon's member QPS and burst, all members at
// once as the daemon's informers start, and writes each member's objects,
// computed from what it read, with the floor's workers as soon as that
// member's lists return. The ServiceImports are computed up front, as the
// write-only floor does: the fleet's members export the same Services.
// It lists no ServiceExports: the benchmark runs the daemon in annotation
// mode, in which it reads none either.
type readingFloor struct {
	*floor
	members []kubernetes.Interface // by member index
	reads   atomic.Int64
	// retried counts the lists that failed and were made again, as a
	// reflector would after a failed list.
	retried atomic.Int64
}

// listBackoff spaces the retries of a failed member list.
var listBackoff = wait.Backoff{Steps: 8, Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.1, Cap: 10 * time.Second}

// list calls list until it succeeds, counting the retries, or gives up
// after listBackoff's steps or when ctx ends.
func (rf *readingFloor) list(ctx context.Context, list func() error) error {
	return retry.OnError(listBackoff, func(error) bool {
		if ctx.Err() != nil {
			return false
		}
		rf.retried.Add(1)
		return true
	}, list)
}

func newReadingFloor(fl *floor, proxy *memberProxy) (*readingFloor, error) {
	rf := &readingFloor{floor: fl}
	for _, m := range fl.f.members {
		cfg, err := proxy.restConfig(m)
		if err != nil {
			return nil, err
		}
		cfg.QPS, cfg.Burst = memberQPS, memberBurst
		cfg.UserAgent = "endpoint-aggregator-bench-reading-floor"
		c, err := kubernetes.NewForConfig(clusters.WithProtobuf(cfg))
		if err != nil {
			return nil, err
		}
		rf.members = append(rf.members, c)
	}
	return rf, nil
}

// cold runs the reading floor's cold start; clusterSet are the
// ServiceImport jobs of coldJobs.
func (rf *readingFloor) cold(ctx context.Context, clusterSet []func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs := make(chan func(context.Context) error, len(clusterSet)+len(rf.members)*len(rf.f.services))
	for _, j := range clusterSet {
		jobs <- j
	}
	var readers sync.WaitGroup
	for m := range rf.members {
		readers.Go(func() {
			srcs, err := rf.read(ctx, m)
			if err != nil {
				cancel(fmt.Errorf("reading floor: member %s: %w", rf.f.members[m], err))
				return
			}
			for s, src := range srcs {
				jobs <- rf.memberJob(m, s, src)
			}
		})
	}
	go func() {
		readers.Wait()
		close(jobs)
	}()
	var writers sync.WaitGroup
	for range rf.workers {
		writers.Go(func() {
			for job := range jobs {
				if ctx.Err() != nil {
					continue // drain
				}
				if err := job(ctx); err != nil {
					cancel(fmt.Errorf("reading floor: %w", err))
				}
			}
		})
	}
	writers.Wait()
	if err := context.Cause(ctx); err != nil && ctx.Err() != nil {
		return err
	}
	return nil
}

// read lists member m's Services and EndpointSlices and returns the source
// of each fleet service it has, by service index.
func (rf *readingFloor) read(ctx context.Context, m int) (map[int]endpoints.Source, error) {
	c := rf.members[m]
	var svcs *corev1.ServiceList
	if err := rf.list(ctx, func() (err error) {
		svcs, err = c.CoreV1().Services(appNamespace).List(ctx, metav1.ListOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	rf.reads.Add(1)
	var slices *discoveryv1.EndpointSliceList
	if err := rf.list(ctx, func() (err error) {
		slices, err = c.DiscoveryV1().EndpointSlices(appNamespace).List(ctx, metav1.ListOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	rf.reads.Add(1)
	byService := map[string][]*discoveryv1.EndpointSlice{}
	for i := range slices.Items {
		sl := &slices.Items[i]
		name := sl.Labels[discoveryv1.LabelServiceName]
		byService[name] = append(byService[name], sl)
	}
	have := map[string]bool{}
	for i := range svcs.Items {
		have[svcs.Items[i].Name] = true
	}
	out := make(map[int]endpoints.Source, len(rf.f.services))
	for s := range rf.f.services {
		if name := serviceName(s); have[name] {
			out[s] = rf.source(m, s, byService[name])
		}
	}
	if len(out) != len(rf.f.services) {
		return nil, fmt.Errorf("listed %d of the fleet's %d Services", len(out), len(rf.f.services))
	}
	return out, nil
}
