package clusters

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// AnnotationMemberCompression on a registration Secret or ClusterProfile
// decides, for its member alone, whether the member's API server may gzip
// its responses: "true" or "false". Without it the daemon's
// --member-compression (Options.DisableCompression) applies. Gzip saves
// bytes on a slow or metered link; without it each watch holds no
// decompressor in the daemon and the member compresses nothing.
const AnnotationMemberCompression = "endpoint-aggregator.io/member-compression"

// ParseMemberCompression reads AnnotationMemberCompression: nil when it is
// absent, or when it is neither "true" nor "false", which is an error that
// says the daemon's setting applies instead.
func ParseMemberCompression(annotations map[string]string) (*bool, error) {
	v, ok := annotations[AnnotationMemberCompression]
	if !ok {
		return nil, nil
	}
	switch v {
	case "true":
		return ptr.To(true), nil
	case "false":
		return ptr.To(false), nil
	}
	return nil, fmt.Errorf("annotation %s=%q is neither \"true\" nor \"false\"; the daemon's --member-compression applies", AnnotationMemberCompression, v)
}

// applyCompression sets whether cfg asks for gzip: the registration's
// choice when it made one (compress), else off when the daemon turns it
// off, else what the kubeconfig says.
func applyCompression(cfg *rest.Config, daemonDisables bool, compress *bool) {
	switch {
	case compress != nil:
		cfg.DisableCompression = !*compress
	case daemonDisables:
		cfg.DisableCompression = true
	}
}
