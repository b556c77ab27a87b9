package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// changer makes member EndpointSlice changes: one endpoint replaced by a new
// address (a pod replaced), with a fresh last-change-trigger-time, and waits
// for the new address in a hub's slices.
type changer struct {
	f      *fleet
	member kubernetes.Interface
	rng    *rand.Rand
	rngMu  sync.Mutex
}

func newChanger(f *fleet, member kubernetes.Interface) *changer {
	return &changer{f: f, member: member, rng: rand.New(rand.NewPCG(1, 2))}
}

func (c *changer) intn(n int) int {
	c.rngMu.Lock()
	defer c.rngMu.Unlock()
	return c.rng.IntN(n)
}

// change replaces endpoint k (modulo the slice's size) of ms, awaiting the
// new address in t.
func (c *changer) change(ctx context.Context, t *tracker, ms *memberSlice, k int) (*pending, error) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	sl := ms.obj.DeepCopy()
	k %= len(sl.Endpoints)
	old := sl.Endpoints[k].Addresses[0]
	ip := c.f.newIP()
	sl.Endpoints[k] = endpoint(serviceName(ms.s), ip, k)
	t0 := time.Now()
	if sl.Annotations == nil {
		sl.Annotations = map[string]string{}
	}
	sl.Annotations[corev1.EndpointsLastChangeTriggerTime] = t0.UTC().Format(time.RFC3339Nano)
	p := t.expect(ip, t0)
	t.supersede(old)
	out, err := c.member.DiscoveryV1().EndpointSlices(appNamespace).Update(ctx, sl, metav1.UpdateOptions{})
	if err != nil {
		t.forget(ip)
		return nil, fmt.Errorf("member: update EndpointSlice %s: %w", sl.Name, err)
	}
	ms.obj = out
	return p, nil
}

// randomSlice picks a slice of member service (m, s) and an endpoint in it.
func (c *changer) randomSlice(m, s int) (*memberSlice, int) {
	list := c.f.slices[m][s]
	return list[c.intn(len(list))], c.intn(memberSliceSize)
}

// distinctKeys returns n member services (m, s), distinct while n allows.
func (c *changer) distinctKeys(n int) [][2]int {
	total := len(c.f.members) * len(c.f.services)
	c.rngMu.Lock()
	perm := c.rng.Perm(total)
	c.rngMu.Unlock()
	out := make([][2]int, n)
	for i := range out {
		k := perm[i%total]
		out[i] = [2]int{k / len(c.f.services), k % len(c.f.services)}
	}
	return out
}

// idleResult is the outcome of changes made one at a time.
type idleResult struct {
	latencies []time.Duration
	lost      int // never showed within the timeout
	elapsed   time.Duration
}

// idle makes n changes one at a time, each in another member service, and
// waits for each to show in t's hub before the next (after a short gap, so
// that the writes that follow the measured one also land).
func (c *changer) idle(ctx context.Context, t *tracker, n int, gap, timeout time.Duration) (idleResult, error) {
	var r idleResult
	begin := time.Now()
	for _, k := range c.distinctKeys(n) {
		ms, ep := c.randomSlice(k[0], k[1])
		p, err := c.change(ctx, t, ms, ep)
		if err != nil {
			return r, err
		}
		select {
		case <-p.done:
			if d, ok := p.latency(); ok {
				r.latencies = append(r.latencies, d)
			}
		case <-time.After(timeout):
			r.lost++
			t.forget(p.ip)
			if r.lost > n/10+1 {
				return r, fmt.Errorf("%s: %d changes did not show in the hub within %s", t.name, r.lost, timeout)
			}
		case <-ctx.Done():
			return r, ctx.Err()
		}
		select {
		case <-time.After(gap):
		case <-ctx.Done():
			return r, ctx.Err()
		}
	}
	r.elapsed = time.Since(begin)
	return r, nil
}

// churnResult is the outcome of a churn phase.
type churnResult struct {
	issued, failed, skipped int
	pendings                []*pending
	elapsed                 time.Duration
}

// rate is the achieved change rate.
func (r churnResult) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.issued) / r.elapsed.Seconds()
}

// churn makes changes in random member services at rate per second for d,
// awaiting each in t. Changes the member apiserver cannot take in time are
// skipped (counted), so the rate is a ceiling.
func (c *changer) churn(ctx context.Context, t *tracker, rate float64, d time.Duration) churnResult {
	var r churnResult
	if rate <= 0 || d <= 0 {
		return r
	}
	jobs := make(chan struct{}, 256)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range jobs {
				ms, ep := c.randomSlice(c.intn(len(c.f.members)), c.intn(len(c.f.services)))
				p, err := c.change(ctx, t, ms, ep)
				mu.Lock()
				if err != nil {
					r.failed++
				} else {
					r.pendings = append(r.pendings, p)
				}
				mu.Unlock()
			}
		})
	}
	begin := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	sent := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case now := <-tick.C:
			el := now.Sub(begin)
			if el >= d {
				break loop
			}
			for due := int(rate*el.Seconds()) - sent - r.skipped; due > 0; due-- {
				select {
				case jobs <- struct{}{}:
					sent++
				default:
					r.skipped++
				}
			}
		}
	}
	tick.Stop()
	close(jobs)
	wg.Wait()
	r.elapsed = time.Since(begin)
	r.issued = len(r.pendings)
	return r
}
