package testenv

import (
	"errors"
	"sync"
)

// Spec names one cluster for StartAll.
type Spec struct {
	Name    string
	Options Options
}

// StartAll starts the clusters concurrently and returns them in the order of
// specs. If any fails, the ones that started are stopped again and the
// joined errors are returned.
func StartAll(specs ...Spec) ([]*Cluster, error) {
	clusters := make([]*Cluster, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Go(func() {
			clusters[i], errs[i] = Start(s.Name, s.Options)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = StopAll(clusters...)
		return nil, err
	}
	return clusters, nil
}

// StopAll stops the clusters concurrently (nil entries are ignored) and
// returns the joined errors.
func StopAll(clusters ...*Cluster) error {
	errs := make([]error, len(clusters))
	var wg sync.WaitGroup
	for i, c := range clusters {
		if c == nil {
			continue
		}
		wg.Go(func() { errs[i] = c.Stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}
