package endpoints

import corev1 "k8s.io/api/core/v1"

// clonePtr returns a new pointer to a copy of *p, or nil.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// ptrEqual reports whether a and b are both nil or point to equal values.
func ptrEqual[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// protocolOrTCP returns p, or TCP, the API server's default, when unset.
func protocolOrTCP(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}
