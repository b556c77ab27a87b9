package endpoints

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// isHeadless reports whether svc has no cluster IP.
func isHeadless(svc *corev1.Service) bool {
	return svc.Spec.ClusterIP == corev1.ClusterIPNone
}

// ServiceNeedsRecreate reports whether live, a hub Service we wrote, cannot
// be updated to desired because a field that changes is immutable: the
// cluster IP (headless or not) or the primary IP family. The caller must
// delete and recreate it.
func ServiceNeedsRecreate(desired, live *corev1.Service) bool {
	if isHeadless(desired) != isHeadless(live) {
		return true
	}
	d, l := desired.Spec.IPFamilies, live.Spec.IPFamilies
	return len(d) > 0 && len(l) > 0 && d[0] != l[0]
}

// servicePort returns the hub port for a member port. Hub Services are
// selectorless, so targetPort is only documentation: it is the port itself.
func servicePort(name string, protocol corev1.Protocol, port int32, appProtocol *string) corev1.ServicePort {
	return corev1.ServicePort{
		Name:        name,
		Protocol:    protocolOrTCP(protocol),
		Port:        port,
		AppProtocol: clonePtr(appProtocol),
		TargetPort:  intstr.FromInt32(port),
	}
}

// baseSpecUpToDate compares the spec fields we own on every hub Service:
// type, headless-ness, the (absent) selector, ports and session affinity.
func baseSpecUpToDate(desired, live *corev1.Service) bool {
	return desired.Spec.Type == live.Spec.Type &&
		isHeadless(desired) == isHeadless(live) &&
		len(desired.Spec.Selector) == 0 && len(live.Spec.Selector) == 0 &&
		slices.EqualFunc(desired.Spec.Ports, live.Spec.Ports, servicePortEqual) &&
		affinityEqual(&desired.Spec, &live.Spec)
}

// applyBaseSpec sets the fields compared by baseSpecUpToDate, except the
// immutable cluster IP, from desired onto out.
func applyBaseSpec(desired *corev1.Service, out *corev1.Service) {
	out.Spec.Type = desired.Spec.Type
	out.Spec.Selector = nil
	out.Spec.Ports = make([]corev1.ServicePort, len(desired.Spec.Ports))
	for i := range desired.Spec.Ports {
		desired.Spec.Ports[i].DeepCopyInto(&out.Spec.Ports[i])
	}
	out.Spec.SessionAffinity = desired.Spec.SessionAffinity
	out.Spec.SessionAffinityConfig = desired.Spec.SessionAffinityConfig.DeepCopy()
}

// servicePortEqual compares the port fields we set, reading an unset
// protocol as TCP and an unset target port as the port, as the API server
// defaults them. A node port is never set on a ClusterIP Service.
func servicePortEqual(a, b corev1.ServicePort) bool {
	return a.Name == b.Name &&
		protocolOrTCP(a.Protocol) == protocolOrTCP(b.Protocol) &&
		a.Port == b.Port &&
		ptr.Equal(a.AppProtocol, b.AppProtocol) &&
		targetPort(a) == targetPort(b) &&
		b.NodePort == 0
}

func targetPort(p corev1.ServicePort) intstr.IntOrString {
	if p.TargetPort == (intstr.IntOrString{}) {
		return intstr.FromInt32(p.Port)
	}
	return p.TargetPort
}

// affinityEqual compares the session affinity of two specs as the API
// server defaults it: unset is None, and ClientIP without a timeout has the
// default timeout.
func affinityEqual(a, b *corev1.ServiceSpec) bool {
	return sameAffinity(a.SessionAffinity, a.SessionAffinityConfig, b.SessionAffinity, b.SessionAffinityConfig)
}

func sameAffinity(a corev1.ServiceAffinity, ac *corev1.SessionAffinityConfig, b corev1.ServiceAffinity, bc *corev1.SessionAffinityConfig) bool {
	return affinity(a) == affinity(b) &&
		(affinity(a) != corev1.ServiceAffinityClientIP || affinityTimeout(ac) == affinityTimeout(bc))
}

func affinity(a corev1.ServiceAffinity) corev1.ServiceAffinity {
	if a == "" {
		return corev1.ServiceAffinityNone
	}
	return a
}

func affinityTimeout(c *corev1.SessionAffinityConfig) int32 {
	if c == nil || c.ClientIP == nil || c.ClientIP.TimeoutSeconds == nil {
		return corev1.DefaultClientIPServiceAffinitySeconds
	}
	return *c.ClientIP.TimeoutSeconds
}

// clonePtr returns a new pointer to a copy of *p, or nil.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// protocolOrTCP returns p, or TCP, the API server's default, when unset.
func protocolOrTCP(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

// internalTrafficPolicy reads an unset policy as Cluster, the default.
func internalTrafficPolicy(p *corev1.ServiceInternalTrafficPolicy) corev1.ServiceInternalTrafficPolicy {
	if p == nil {
		return corev1.ServiceInternalTrafficPolicyCluster
	}
	return *p
}

// planService is the change from live to want, for a per-cluster or derived
// Service: create, recreate, or update with merge.
func planService(want, live *corev1.Service, upToDate func(want, live *corev1.Service) bool, merge func(want, live *corev1.Service) *corev1.Service) ServiceChange {
	switch {
	case live == nil:
		return ServiceChange{Create: want}
	case ServiceNeedsRecreate(want, live):
		return ServiceChange{Delete: live, Create: want}
	case !upToDate(want, live):
		return ServiceChange{Update: merge(want, live)}
	}
	return ServiceChange{}
}
