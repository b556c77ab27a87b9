package app

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
)

// hubIdentityInterval is how often the daemon reads the hub's About API
// properties: the ClusterSet members are checked against.
const hubIdentityInterval = time.Minute

// hubIdentity is what the hub's About API says of it, read every
// hubIdentityInterval; the zero Identity until the first read.
type hubIdentity struct {
	v atomic.Pointer[clusters.Identity]
}

func (h *hubIdentity) clusterSet() string {
	if id := h.v.Load(); id != nil {
		return id.ClusterSet
	}
	return ""
}

// watchHubIdentity reads the hub's About API properties every
// hubIdentityInterval until ctx ends (readHubIdentity).
func (d *Daemon) watchHubIdentity(ctx context.Context) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		t := time.NewTimer(hubIdentityInterval)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.readHubIdentity(ctx)
	}, 0)
}

// readHubIdentity reads the hub's About API properties. With
// --hub-is-member it gives the hub its cluster id when the hub serves the
// API and has none, and says so when the hub names itself otherwise than
// --hub-cluster-name. The daemon calls it once before it connects members,
// so that they are checked against the hub's ClusterSet from the start.
func (d *Daemon) readHubIdentity(ctx context.Context) {
	rc := d.about
	if rc == nil { // unit tests
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	id, err := clusters.ReadIdentity(ctx, rc)
	if err != nil {
		klog.V(2).InfoS("Reading the hub's About API properties", "err", err)
		return
	}
	if old := d.hubID.v.Swap(&id); old == nil || *old != id {
		klog.InfoS("The hub's About API properties", "served", id.Served, "clusterID", id.ClusterID, "clusterSet", id.ClusterSet)
	}
	if !d.opts.HubIsMember || !id.Served {
		return
	}
	switch {
	case id.ClusterID == "":
		err := createClusterProperty(ctx, rc, clusters.PropertyClusterID, d.opts.HubClusterName)
		switch {
		case apierrors.IsForbidden(err):
			d.aboutForbidden.Do(func() {
				klog.InfoS("Not giving the hub its About API cluster id: the daemon may not create ClusterProperties (grant create on clusterproperties.about.k8s.io, or create it yourself)",
					"property", clusters.PropertyClusterID, "value", d.opts.HubClusterName)
			})
			return
		case err != nil && !apierrors.IsAlreadyExists(err):
			klog.ErrorS(err, "Giving the hub its About API cluster id", "property", clusters.PropertyClusterID, "value", d.opts.HubClusterName)
			return
		}
		klog.InfoS("Gave the hub its About API cluster id", "property", clusters.PropertyClusterID, "value", d.opts.HubClusterName)
	case id.ClusterID != d.opts.HubClusterName:
		klog.InfoS("The hub's About API cluster id differs from --hub-cluster-name; as a member, the hub is refused until they agree",
			"property", clusters.PropertyClusterID, "value", id.ClusterID, "hubClusterName", d.opts.HubClusterName)
	}
}

// createClusterProperty creates a ClusterProperty through rc, in the newest
// version the cluster serves.
func createClusterProperty(ctx context.Context, rc rest.Interface, name, value string) error {
	var last error
	for _, v := range []string{"v1beta1", "v1alpha1"} {
		body, err := json.Marshal(map[string]any{
			"apiVersion": "about.k8s.io/" + v,
			"kind":       "ClusterProperty",
			"metadata":   map[string]any{"name": name},
			"spec":       map[string]any{"value": value},
		})
		if err != nil {
			return fmt.Errorf("encoding ClusterProperty %s: %w", name, err)
		}
		last = rc.Post().AbsPath("/apis/about.k8s.io", v, "clusterproperties").
			SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error()
		if !apierrors.IsNotFound(last) {
			return last
		}
	}
	return last
}

// aboutRESTConfig makes cfg a config for an unversioned client of absolute
// paths (the About API's group has no typed client here), as discovery's is.
func aboutRESTConfig(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.APIPath = ""
	cfg.GroupVersion = nil
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return cfg
}
