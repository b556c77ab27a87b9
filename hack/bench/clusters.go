package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

// logDir makes the temporary directory a run's daemons log into. Its
// caller defers done, telling it whether to keep the directory (-keep-logs,
// or a failed run).
func logDir(run string) (dir string, done func(keep bool), err error) {
	dir, err = os.MkdirTemp("", "endpoint-aggregator-"+run+"-")
	if err != nil {
		return "", nil, err
	}
	return dir, func(keep bool) {
		if keep {
			logf("daemon logs kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	}, nil
}

// startClusters starts one control plane (etcd + kube-apiserver, with the
// MCS CRDs) per name, in that order; stop stops them all.
func startClusters(names ...string) (cs []*testenv.Cluster, stop func(), err error) {
	logf("starting %d clusters (%s): etcd + kube-apiserver each", len(names), strings.Join(names, ", "))
	specs := make([]testenv.Spec, len(names))
	for i, n := range names {
		specs[i] = testenv.Spec{Name: n, Options: testenv.Options{CRDs: true}}
	}
	cs, err = testenv.StartAll(specs...)
	if err != nil {
		return nil, nil, fmt.Errorf("starting the clusters: %w", err)
	}
	return cs, func() {
		logf("stopping the clusters")
		if err := testenv.StopAll(cs...); err != nil {
			logf("%v", err)
		}
	}, nil
}
