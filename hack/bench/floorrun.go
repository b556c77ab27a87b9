package main

import (
	"context"
	"fmt"
	"time"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

// runFloor measures the bare client against the floor hub.
func runFloor(ctx context.Context, c *config, r *results, f *fleet, floorHub *testenv.Cluster, proxy *memberProxy, ch *changer) error {
	tr, _, err := startTracker(ctx, "floor", f, c, floorHub)
	if err != nil {
		return err
	}
	defer tr.close()
	fl, err := newFloor(f, c.mode(), floorHub.Config, float32(c.qps), c.burst, c.workers)
	if err != nil {
		return err
	}

	leaseCtx, stopLeases := context.WithCancel(ctx)
	defer stopLeases()
	go fl.keepLeases(leaseCtx)

	jobs := fl.coldJobs()
	var cold []float64
	for i := range c.runs {
		if i > 0 {
			logf("floor: emptying its hub for cold run %d of %d", i+1, c.runs)
			if err := emptyHub(ctx, floorHub.Config); err != nil {
				return err
			}
			if err := tr.waitEmpty(ctx, convergeLimit); err != nil {
				return err
			}
			fl.forget()
		}
		logf("floor: writing every hub object (%d jobs, %d workers, QPS %g, burst %d)%s", len(jobs), c.workers, c.qps, c.burst, runOf(i, c.runs))
		w0 := fl.writes.Load()
		t0 := time.Now()
		if err := fl.cold(ctx, jobs); err != nil {
			return err
		}
		logf("floor: writes done after %s", time.Since(t0).Round(time.Millisecond))
		at, err := tr.waitConverged(ctx, convergeLimit, "floor cold")
		if err != nil {
			return err
		}
		cold = append(cold, at.Sub(t0).Seconds())
		r.Floor.ColdWrites = fl.writes.Load() - w0
		logf("floor: converged in %.2fs with %d writes", cold[i], r.Floor.ColdWrites)
	}
	r.Floor.ColdRuns = spreadOf(cold)
	r.Floor.ColdSeconds = r.Floor.ColdRuns.Median

	// The reading floor: the same writes, after reading what the daemon
	// must read.
	rf, err := newReadingFloor(fl, proxy)
	if err != nil {
		return err
	}
	cold = cold[:0]
	for i := range c.runs {
		logf("reading floor: emptying the floor hub%s", runOf(i, c.runs))
		if err := emptyHub(ctx, floorHub.Config); err != nil {
			return err
		}
		if err := tr.waitEmpty(ctx, convergeLimit); err != nil {
			return err
		}
		fl.forget()
		logf("reading floor: listing %d members' Services and EndpointSlices (QPS %d, burst %d each) and writing every hub object (%d workers)%s",
			len(rf.members), memberQPS, memberBurst, c.workers, runOf(i, c.runs))
		w0, r0, retried0 := fl.writes.Load(), rf.reads.Load(), rf.retried.Load()
		t0 := time.Now()
		if err := rf.cold(ctx, jobs[:len(f.services)]); err != nil {
			return err
		}
		at, err := tr.waitConverged(ctx, convergeLimit, "reading floor cold")
		if err != nil {
			return err
		}
		cold = append(cold, at.Sub(t0).Seconds())
		r.Floor.ReadingColdReads = rf.reads.Load() - r0
		if w := fl.writes.Load() - w0; w != r.Floor.ColdWrites {
			return fmt.Errorf("reading floor: %d writes, the floor made %d", w, r.Floor.ColdWrites)
		}
		logf("reading floor: converged in %.2fs with %d member reads (%d failed lists made again)", cold[i], r.Floor.ReadingColdReads, rf.retried.Load()-retried0)
	}
	r.Floor.ReadingColdRuns = spreadOf(cold)
	r.Floor.ReadingColdSeconds = r.Floor.ReadingColdRuns.Median

	memberCfg, err := proxy.restConfig(allView)
	if err != nil {
		return err
	}
	fc, err := fl.startController(ctx, memberCfg)
	if err != nil {
		return err
	}
	defer fc.close()

	w0 := fl.writes.Load()
	for i := range c.runs {
		logf("floor: %d single changes, one at a time%s", c.changes, runOf(i, c.runs))
		idle, err := ch.idle(ctx, tr, c.changes, idleGap, changeTimeout)
		if err != nil {
			return err
		}
		sleepCtx(ctx, time.Second) // let the Endpoints writes that follow the slices land
		s := summarize(idle.latencies, idle.lost, 0)
		r.Floor.IdleRuns = append(r.Floor.IdleRuns, s)
		logf("floor: idle p50 %.1fms p99 %.1fms", s.P50, s.P99)
	}
	r.Floor.Idle = medianStats(r.Floor.IdleRuns)
	r.Floor.IdleWritesPerChange = float64(fl.writes.Load()-w0) / float64(c.changes*c.runs)

	if c.churn > 0 && c.churnDuration > 0 {
		w0 = fl.writes.Load()
		issued := 0
		for i := range c.runs {
			logf("floor: churn at %g changes/s for %s%s", c.churn, c.churnDuration, runOf(i, c.runs))
			res := ch.churn(ctx, tr, c.churn, c.churnDuration)
			missing := waitAll(ctx, res.pendings, 2*time.Minute)
			sleepCtx(ctx, time.Second)
			s := summarizePending(res, missing)
			r.Floor.ChurnRuns = append(r.Floor.ChurnRuns, s)
			issued += res.issued
			logf("floor: churn %.0f/s achieved, p50 %.1fms p99 %.1fms", s.Rate, s.P50, s.P99)
		}
		r.Floor.Churn = medianStats(r.Floor.ChurnRuns)
		r.Floor.ChurnWritesPerChange = float64(fl.writes.Load()-w0) / float64(max(1, issued))
	}
	r.Floor.ControllerErrors = fc.errors.Load()
	r.Floor.LeaseWrites = fl.leaseWrites.Load()
	return ctx.Err()
}
