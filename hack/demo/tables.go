package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// hubState is what the demo shows of the hub's application namespace.
type hubState struct {
	imports   []mcsv1beta1.ServiceImport
	services  []corev1.Service
	slices    []discoveryv1.EndpointSlice
	endpoints []corev1.Endpoints
}

func printHub(w io.Writer, s hubState) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	section := func(title string, header ...string) {
		fmt.Fprintf(tw, "\n%s\n", title)
		fmt.Fprintln(tw, strings.Join(header, "\t"))
	}
	row := func(cols ...string) { fmt.Fprintln(tw, strings.Join(cols, "\t")) }

	imports := append([]mcsv1beta1.ServiceImport(nil), s.imports...)
	sort.Slice(imports, func(i, j int) bool { return imports[i].Name < imports[j].Name })
	section(fmt.Sprintf("ServiceImports (%d)", len(imports)), "NAME", "TYPE", "PORTS", "IPS", "CLUSTERS")
	for _, si := range imports {
		var ports, clusters []string
		for _, p := range si.Spec.Ports {
			ports = append(ports, portString(p.Name, p.Port, p.Protocol))
		}
		for _, c := range si.Status.Clusters {
			clusters = append(clusters, c.Cluster)
		}
		sort.Strings(clusters)
		row(si.Name, string(si.Spec.Type), list(ports), list(si.Spec.IPs), list(clusters))
	}

	services := append([]corev1.Service(nil), s.services...)
	sort.Slice(services, func(i, j int) bool { return services[i].Name < services[j].Name })
	section(fmt.Sprintf("Services (%d)", len(services)), "NAME", "TYPE", "CLUSTER-IP", "PORTS", "SOURCE-CLUSTER")
	for _, svc := range services {
		var ports []string
		for _, p := range svc.Spec.Ports {
			ports = append(ports, portString(p.Name, p.Port, p.Protocol))
		}
		row(svc.Name, string(svc.Spec.Type), orDash(svc.Spec.ClusterIP), list(ports), orDash(svc.Labels[sourceLabel]))
	}

	slices := append([]discoveryv1.EndpointSlice(nil), s.slices...)
	sort.Slice(slices, func(i, j int) bool { return slices[i].Name < slices[j].Name })
	section(fmt.Sprintf("EndpointSlices (%d)", len(slices)), "NAME", "SERVICE", "SOURCE-CLUSTER", "ADDRESS-TYPE", "READY/TOTAL", "ADDRESSES")
	for _, sl := range slices {
		ready := 0
		var addrs []string
		for _, e := range sl.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready { // nil means ready
				ready++
			}
			addrs = append(addrs, e.Addresses...)
		}
		svcName := sl.Labels[mcsServiceLabel]
		if svcName == "" {
			svcName = sl.Labels[discoveryv1.LabelServiceName]
		}
		row(sl.Name, orDash(svcName), orDash(sl.Labels[mcsClusterLabel]), string(sl.AddressType),
			fmt.Sprintf("%d/%d", ready, len(sl.Endpoints)), list(addrs))
	}

	endpoints := append([]corev1.Endpoints(nil), s.endpoints...)
	sort.Slice(endpoints, func(i, j int) bool { return endpoints[i].Name < endpoints[j].Name })
	section(fmt.Sprintf("Endpoints (%d)", len(endpoints)), "NAME", "READY", "NOT-READY", "PORTS")
	for _, ep := range endpoints {
		var ready, notReady, ports []string
		for _, ss := range ep.Subsets {
			for _, a := range ss.Addresses {
				ready = append(ready, a.IP)
			}
			for _, a := range ss.NotReadyAddresses {
				notReady = append(notReady, a.IP)
			}
			for _, p := range ss.Ports {
				ports = append(ports, portString(p.Name, p.Port, p.Protocol))
			}
		}
		row(ep.Name, counted(ready), counted(notReady), list(dedup(ports)))
	}
	return tw.Flush()
}

func portString(name string, port int32, proto corev1.Protocol) string {
	s := strconv.Itoa(int(port)) + "/" + string(orTCP(proto))
	if name != "" {
		s = name + ":" + s
	}
	return s
}

func orTCP(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

func list(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}

// counted renders "2 (10.0.0.1,10.0.0.2)" or "0".
func counted(ips []string) string {
	if len(ips) == 0 {
		return "0"
	}
	sort.Strings(ips)
	return fmt.Sprintf("%d (%s)", len(ips), strings.Join(ips, ","))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func dedup(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
