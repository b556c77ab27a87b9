package endpoints

import (
	"crypto/sha256"
	"encoding/base32"
	"strconv"
	"strings"
)

const (
	// dnsLabelMaxLength is the maximum length of a DNS-1123 label.
	dnsLabelMaxLength = 63
	// nameHashLength is the length of the hash ending a shortened name.
	nameHashLength = 8
)

var base32Hex = base32.HexEncoding.WithPadding(base32.NoPadding)

// nameHash returns the lower-case, unpadded base32hex SHA-256 of s. Its
// alphabet, [0-9a-v], is valid anywhere in a DNS label.
func nameHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return strings.ToLower(base32Hex.EncodeToString(sum[:]))
}

// DerivedServiceName returns the name of the Service derived from the
// ServiceImport namespace/name, following the mcs-api reference controller:
// "derived-" and the first 10 characters of nameHash("namespace/name").
func DerivedServiceName(namespace, name string) string {
	return "derived-" + nameHash(namespace + "/" + name)[:10]
}

// PerClusterName returns the name of the per-cluster Service and Endpoints of
// service in cluster: "<service>-<cluster>". Names longer than a DNS label are
// cut and end with "-" and a hash of "<service>/<cluster>" instead, in which
// case shortened is true; "/" occurs in neither name, so distinct pairs hash
// distinct strings.
//
// Unshortened names are ambiguous ("a-b" in "c" and "a" in "b-c" are both
// "a-b-c"); the LabelServiceName and LabelSourceCluster labels tell them apart.
func PerClusterName(service, cluster string) (name string, shortened bool) {
	name = service + "-" + cluster
	if len(name) <= dnsLabelMaxLength {
		return name, false
	}
	prefix := strings.TrimRight(name[:dnsLabelMaxLength-nameHashLength-1], "-")
	return prefix + "-" + nameHash(service + "/" + cluster)[:nameHashLength], true
}

// SliceName returns the name of the hub EndpointSlice number index (>= 0)
// aggregated from service in cluster:
// "<DerivedServiceName(namespace, service)>-<cluster>-<index>".
//
// Names of different clusters never collide: the derived name has a fixed
// length and the name always ends in "-<index>", whose digits contain no "-",
// so the cluster is exactly what lies between the two. The result is at most
// 18+1+63+1+19 characters, well within a DNS subdomain.
func SliceName(namespace, service, cluster string, index int) string {
	return slicePrefix(namespace, service, cluster) + strconv.Itoa(index)
}

func slicePrefix(namespace, service, cluster string) string {
	return DerivedServiceName(namespace, service) + "-" + cluster + "-"
}

// sliceIndex returns the index of a slice named by SliceName with prefix.
func sliceIndex(name, prefix string) (int, bool) {
	digits, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(digits)
	if err != nil || i < 0 || strconv.Itoa(i) != digits {
		return 0, false
	}
	return i, true
}
