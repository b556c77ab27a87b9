package clusters

import (
	"k8s.io/client-go/rest"
)

// addStatic registers a member that has no Secret, and runs its connection
// while it is wanted here.
func (r *Registry) addStatic(name string, orig *rest.Config) error {
	r.staticMu.Lock()
	defer r.staticMu.Unlock()
	r.mu.Lock()
	m := r.members[name]
	if m == nil {
		m = &member{static: orig}
		r.members[name] = m
	}
	running := m.active != nil
	wanted := r.wanted(name)
	var stop *Cluster
	if !wanted {
		stop, m.active, m.elsewhere = m.active, nil, true
	}
	r.mu.Unlock()
	if stop != nil {
		stop.shutdown()
	}
	if !wanted || running {
		return nil
	}
	cfg := rest.CopyConfig(orig)
	r.configure(cfg, name, nil)
	clients, err := r.opts.NewClients(cfg)
	if err != nil {
		return err
	}
	svcH, sliceH, exportH := r.handler.EventHandlers(name)
	c, err := newCluster(name, "static", "", clients, EventHandlers{Services: svcH, EndpointSlices: sliceH, ServiceExports: exportH}, r.opts.ReadBounds)
	if err != nil {
		return err
	}
	r.mu.Lock()
	m.active, m.elsewhere = c, false
	r.mu.Unlock()
	go r.run(c, nil)
	return nil
}
