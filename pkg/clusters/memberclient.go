package clusters

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	discoveryv1client "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

// memberKube is the part of kubernetes.Interface the daemon uses on a
// member: core/v1 and discovery.k8s.io/v1 for its informers, and the
// discovery client for its health probe. A full Clientset builds a REST
// client, codecs and negotiator for each of some fifty API groups: about
// 40 KB per member that nothing reads. Calling any other group panics (the
// embedded interface is nil); the member code calls none.
type memberKube struct {
	kubernetes.Interface
	core      corev1client.CoreV1Interface
	discovery discoveryv1client.DiscoveryV1Interface
	disco     *discovery.DiscoveryClient
}

func (k *memberKube) CoreV1() corev1client.CoreV1Interface                { return k.core }
func (k *memberKube) DiscoveryV1() discoveryv1client.DiscoveryV1Interface { return k.discovery }
func (k *memberKube) Discovery() discovery.DiscoveryInterfaces            { return k.disco }

// newMemberClients returns the clients of one member, sharing one HTTP
// client (one connection pool). As with the Clientset they replace, the
// Kubernetes groups share one rate limiter and the MCS client has its own.
func newMemberClients(cfg *rest.Config, watchExports bool) (Clients, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return Clients{}, err
	}
	kcfg := WithProtobuf(cfg)
	if kcfg.RateLimiter == nil && kcfg.QPS > 0 {
		if kcfg.Burst <= 0 {
			return Clients{}, fmt.Errorf("member client: QPS %v needs a burst of at least 1", kcfg.QPS)
		}
		kcfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(kcfg.QPS, kcfg.Burst)
	}
	k := &memberKube{}
	if k.core, err = corev1client.NewForConfigAndClient(kcfg, hc); err != nil {
		return Clients{}, err
	}
	if k.discovery, err = discoveryv1client.NewForConfigAndClient(kcfg, hc); err != nil {
		return Clients{}, err
	}
	if k.disco, err = discovery.NewDiscoveryClientForConfigAndClient(kcfg, hc); err != nil {
		return Clients{}, err
	}
	c := Clients{Kube: k}
	if watchExports {
		if c.MCS, err = mcsclientset.NewForConfigAndClient(cfg, hc); err != nil {
			return Clients{}, err
		}
		c.Discovery = k.disco
	}
	return c, nil
}

// WithProtobuf returns a copy of cfg for clients of built-in kinds that
// speak protobuf, as Kubernetes' own controllers do: decoding a watch event
// or a list costs a fraction of the CPU and allocations of JSON. JSON stays
// acceptable, for a server or proxy that answers only in JSON. Custom
// resources (ServiceImports, ServiceExports) have no protobuf form: their
// clients keep cfg.
func WithProtobuf(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.ContentType = runtime.ContentTypeProtobuf
	out.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return out
}
