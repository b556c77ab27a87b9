package clusters

// MemberClusterValue is the value of LabelMemberCluster on a registration
// Secret: the Registry watches only Secrets labelled
// LabelMemberCluster=MemberClusterValue.
const MemberClusterValue = "true"
