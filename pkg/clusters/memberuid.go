package clusters

// AnnotationKubeSystemUID on a registration Secret records the UID of the
// member's kube-system namespace, as `register` read it. It tells one
// cluster from another whatever URL or CA bundle reaches it, so `register`
// can refuse one cluster under two names. The daemon does not read it.
const AnnotationKubeSystemUID = "endpoint-aggregator.io/kube-system-uid"
