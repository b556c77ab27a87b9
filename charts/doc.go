// Package charts holds no code: charts/endpoint-aggregator is the Helm chart
// of the daemon. Its tests check that the chart and config/ agree (the
// mcs-api CRDs and the hub RBAC have one source of truth, config/; `make
// chart-sync` copies them into the chart), that the chart's values and the
// daemon's flags agree, and that the schema refuses bad values.
// test/e2e/chart_test.go runs the daemon with exactly the chart's RBAC.
package charts
