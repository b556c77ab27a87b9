package endpoints

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// maxClientIPAffinitySeconds is the API's limit on a session affinity
// timeout (a day).
const maxClientIPAffinitySeconds = 86400

// SanitizeService returns svc without what the hub's API server would
// refuse in the objects built from it (the ServiceImport, the derived and
// per-cluster Services), which a member behind anything but a stock API
// server may send: invalid ports (name, number, protocol, appProtocol), a
// port name, or number and protocol, used again or an unnamed port beside
// named ones (the first stays), and a session affinity, its config, IP families, internal
// traffic policy or traffic distribution the API does not know, which are
// unset. A merge of many members' exports would otherwise fail for all of
// them on one member's port. It returns svc itself when clean, and what it
// removed. svc is not modified.
func SanitizeService(svc *corev1.Service) (*corev1.Service, []string) {
	if svc == nil {
		return nil, nil
	}
	var problems []string
	spec := &svc.Spec
	var keep []corev1.ServicePort
	dropped := false
	seen := map[string]bool{}
	for _, p := range spec.Ports {
		why := servicePortProblem(p, len(spec.Ports), seen)
		if why != "" {
			problems = append(problems, fmt.Sprintf("port %s %d/%s: %s", p.Name, p.Port, p.Protocol, why))
			dropped = true
			continue
		}
		seen[p.Name], seen[portKey(p)] = true, true
		keep = append(keep, p)
	}
	affinity := spec.SessionAffinity != "" && spec.SessionAffinity != corev1.ServiceAffinityNone && spec.SessionAffinity != corev1.ServiceAffinityClientIP
	if affinity {
		problems = append(problems, fmt.Sprintf("session affinity %q", spec.SessionAffinity))
	}
	affinityConfig := false
	if c := spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		if t := *c.ClientIP.TimeoutSeconds; t <= 0 || t > maxClientIPAffinitySeconds {
			problems = append(problems, fmt.Sprintf("session affinity timeout %ds", t))
			affinityConfig = true
		}
	}
	families := len(spec.IPFamilies) > 2 || (len(spec.IPFamilies) == 2 && spec.IPFamilies[0] == spec.IPFamilies[1]) ||
		slices.ContainsFunc(spec.IPFamilies, func(f corev1.IPFamily) bool { return f != corev1.IPv4Protocol && f != corev1.IPv6Protocol })
	if families {
		problems = append(problems, fmt.Sprintf("IP families %v", spec.IPFamilies))
	}
	itp := spec.InternalTrafficPolicy != nil && *spec.InternalTrafficPolicy != corev1.ServiceInternalTrafficPolicyCluster && *spec.InternalTrafficPolicy != corev1.ServiceInternalTrafficPolicyLocal
	if itp {
		problems = append(problems, fmt.Sprintf("internal traffic policy %q", *spec.InternalTrafficPolicy))
	}
	td := spec.TrafficDistribution != nil && !slices.Contains([]string{corev1.ServiceTrafficDistributionPreferClose,
		corev1.ServiceTrafficDistributionPreferSameZone, corev1.ServiceTrafficDistributionPreferSameNode}, *spec.TrafficDistribution)
	if td {
		problems = append(problems, fmt.Sprintf("traffic distribution %q", *spec.TrafficDistribution))
	}
	local, hasLocal := svc.Annotations[AnnotationPreferLocal]
	badLocal := hasLocal && local != "true" && local != "false"
	if badLocal {
		problems = append(problems, fmt.Sprintf("annotation %s %q (neither true nor false)", AnnotationPreferLocal, local))
	}
	if len(problems) == 0 {
		return svc, nil
	}
	out := svc.DeepCopy()
	if badLocal {
		delete(out.Annotations, AnnotationPreferLocal)
	}
	if dropped {
		out.Spec.Ports = keep
	}
	if affinity {
		out.Spec.SessionAffinity = corev1.ServiceAffinityNone
	}
	if affinity || affinityConfig {
		out.Spec.SessionAffinityConfig = nil
	}
	if families {
		out.Spec.IPFamilies = nil
	}
	if itp {
		out.Spec.InternalTrafficPolicy = nil
	}
	if td {
		out.Spec.TrafficDistribution = nil
	}
	return out, problems
}

// servicePortProblem says what is wrong with a port of a Service with n
// ports, given the names of the ports kept before it; "" for nothing.
func servicePortProblem(p corev1.ServicePort, n int, seen map[string]bool) string {
	protocol := &p.Protocol
	if p.Protocol == "" {
		protocol = nil
	}
	if why := portProblem(p.Name, &p.Port, protocol, p.AppProtocol); why != "" {
		return why
	}
	switch {
	case p.Name == "" && n > 1:
		return "unnamed beside other ports"
	case seen[p.Name]:
		return "name used by an earlier port"
	case seen[portKey(p)]:
		return "number and protocol used by an earlier port"
	}
	return ""
}

// portKey is a port's number and protocol, which no two ports of a Service
// may share; it cannot be a port name.
func portKey(p corev1.ServicePort) string {
	return fmt.Sprintf("#%d/%s", p.Port, protocolOrTCP(p.Protocol))
}

// reservedKey: the keys under the prefixes of our own labels and
// annotations and of the MCS API's, and the managed-by label. An export
// may not set them on the ServiceImport: the daemon reads them there.
func reservedKey(k string) bool {
	prefix, _, ok := strings.Cut(k, "/")
	return k == LabelManagedBy || ok && (prefix == ourPrefix || prefix == mcsPrefix)
}

const (
	ourPrefix = "endpoint-aggregator.io"
	mcsPrefix = "multicluster.kubernetes.io"
)

// SanitizeExported returns the exported labels (annotations false) or
// annotations (true) of a ServiceExport that the hub can hold on its
// ServiceImport: labels with valid keys and values, annotations with valid
// keys, none of them reserved (reservedKey); and what it removed. Their size is FitExport's to bound.
// m is not modified; it is returned as it is when clean.
func SanitizeExported(m map[string]string, annotations bool) (map[string]string, []string) {
	var problems []string
	bad := func(k, v string) string {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return "key: " + errs[0]
		}
		if reservedKey(k) {
			return "key: reserved for the daemon and the MCS API, which read it to tell whose the ServiceImport is"
		}
		if errs := validation.IsValidLabelValue(v); !annotations && len(errs) > 0 {
			return "value: " + errs[0]
		}
		return ""
	}
	for k, v := range m {
		if why := bad(k, v); why != "" {
			problems = append(problems, fmt.Sprintf("%q %s", k, why))
		}
	}
	if len(problems) == 0 {
		return m, nil
	}
	slices.Sort(problems)
	out := make(map[string]string, len(m))
	for k, v := range m {
		if bad(k, v) == "" {
			out[k] = v
		}
	}
	return out, problems
}

// SanitizeExport returns e with what the hub would refuse of its exported
// labels and annotations removed (SanitizeExported), and says what was
// removed.
func SanitizeExport(e Export) (Export, []string) {
	var problems, more []string
	e.ExportedLabels, more = SanitizeExported(e.ExportedLabels, false)
	for _, p := range more {
		problems = append(problems, "exported label "+p)
	}
	e.ExportedAnnotations, more = SanitizeExported(e.ExportedAnnotations, true)
	for _, p := range more {
		problems = append(problems, "exported annotation "+p)
	}
	return e, problems
}
