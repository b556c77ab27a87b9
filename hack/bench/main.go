// Command bench is the scale benchmark behind `make bench` (not a test): it
// runs endpoint-aggregator as a subprocess against real kube-apiservers and
// measures it side by side with a floor, a bare client writing the same hub
// objects with the same client limits and concurrency, in the same run.
//
// It starts three throw-away clusters with internal/testenv: the hub, a
// second hub for the floor, and one member apiserver. The member holds the
// Services and EndpointSlices of every simulated member. Each simulated
// member is registered with its own Secret (cluster name m000, m001, ...)
// whose kubeconfig reaches the member apiserver through a loopback proxy in
// this process under its own port and path (https://127.0.0.1:PORT7/m007;
// a port each, so that each member has its own connections). The proxy
// passes every request through unchanged, except that EndpointSlice lists and
// watches get the label selector bench.endpoint-aggregator.io/member=<name>:
// each simulated member then has its own informers (as a real member would)
// and sees only its own EndpointSlices, so a change in one simulated member
// is a change in exactly one member, as in a real fleet. The Services are
// shared: every member exports the same service names, and the hub merges
// them into one ServiceImport each.
//
// See docs/performance.md for the method, the targets and the latest results.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// config holds the flags.
type config struct {
	members       int
	services      int
	endpoints     int
	churn         float64
	churnDuration time.Duration
	changes       int
	runs          int
	workers       int
	qps           float64
	burst         int
	perCluster    string
	binary        string
	jsonOut       string
	doc           string
	profileDir    string
	timeout       time.Duration
	keepLogs      bool
	daemonFlags   []string
	daemonEnv     []string
	// replicas > 0 adds a phase with that many daemon processes sharing
	// the members.
	replicas int
	soak     soakConfig  // -soak > 0 runs a soak instead (soak.go)
	flood    floodConfig // -flood runs the flood instead (flood.go)
}

// The default scale: its results have their own section of the doc.
const (
	defaultMembers   = 250
	defaultServices  = 10
	defaultEndpoints = 100
)

func main() {
	var c config
	flag.IntVar(&c.members, "members", defaultMembers, "simulated member clusters (each registered under its own name)")
	flag.IntVar(&c.services, "services", defaultServices, "exported Services per member (the same names in every member)")
	flag.IntVar(&c.endpoints, "endpoints", defaultEndpoints, "endpoints per Service per member")
	flag.Float64Var(&c.churn, "churn", 50, "steady churn, in member EndpointSlice changes per second across all members")
	flag.DurationVar(&c.churnDuration, "churn-duration", time.Minute, "how long each churn phase lasts (floor and daemon)")
	flag.IntVar(&c.changes, "changes", 500, "timed single changes made one at a time on an idle system (floor and daemon)")
	flag.IntVar(&c.runs, "runs", 3, "times each timed phase runs (floor and daemon cold convergence, idle changes, churn): the report gives the median and the spread")
	flag.IntVar(&c.workers, "workers", 4, "daemon --workers, and the floor's concurrency")
	flag.Float64Var(&c.qps, "qps", 500, "daemon --kube-api-qps, and the floor client's QPS")
	flag.IntVar(&c.burst, "burst", 1000, "daemon --kube-api-burst, and the floor client's burst")
	flag.StringVar(&c.perCluster, "per-cluster-services", string(endpoints.PerClusterHeadless),
		"daemon --per-cluster-services (mirror, headless or off); the floor writes the same objects. "+
			"mirror needs a hub ClusterIP per member Service, and the test hub's service range (a /24) holds fewer than 254")
	flag.StringVar(&c.binary, "binary", "bin/endpoint-aggregator", "the endpoint-aggregator binary to benchmark (`make bench` builds it)")
	flag.StringVar(&c.jsonOut, "json", "", "also write the results as JSON to this file")
	flag.StringVar(&c.doc, "doc", "", "replace the generated section of this Markdown file (docs/performance.md) with this run's report")
	flag.StringVar(&c.profileDir, "profile-dir", "", "collect CPU, heap and goroutine profiles of the daemon into this directory (needs a binary that serves /debug/pprof with --profiling)")
	flag.IntVar(&c.replicas, "replicas", 0, "after the single daemon, also run this many daemon processes sharing the members (--shard-members) on the emptied hub: their cold start, each one's RSS, a graceful handover and a SIGKILL (0: skip)")
	flag.DurationVar(&c.timeout, "timeout", 30*time.Minute, "give up after this long")
	flag.BoolVar(&c.keepLogs, "keep-logs", false, "keep the daemon's logs (printed path) instead of removing them")
	flag.Func("daemon-flag", "one more flag for the daemon, e.g. -daemon-flag=--member-lease-duration=0 (repeatable; for diagnosis: the report says the run was not the default)", func(v string) error {
		c.daemonFlags = append(c.daemonFlags, v)
		return nil
	})
	flag.Func("daemon-env", "one more environment variable for the daemon, e.g. -daemon-env=GOGC=50 (repeatable; for diagnosis, reported like -daemon-flag)", func(v string) error {
		if !strings.Contains(v, "=") {
			return fmt.Errorf("want NAME=VALUE, got %q", v)
		}
		c.daemonEnv = append(c.daemonEnv, v)
		return nil
	})
	c.soak.addFlags(flag.CommandLine)
	c.flood.addFlags(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "bench: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if err := c.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(2)
	}
	if c.flood.on {
		os.Exit(floodMain(&c))
	}
	if c.soak.duration > 0 {
		os.Exit(soakMain(&c))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	res, err := run(ctx, &c)
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
			fmt.Fprintln(os.Stderr, "\nbench: interrupted")
		} else {
			fmt.Fprintf(os.Stderr, "\nbench: %v\n", err)
		}
		os.Exit(1)
	}
	if err := res.output(&c); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func (c *config) validate() error {
	var errs []error
	if c.members < 1 || c.members > 9999 {
		errs = append(errs, errors.New("-members must be in 1..9999"))
	}
	if c.services < 1 || c.services > 999 {
		errs = append(errs, errors.New("-services must be in 1..999"))
	}
	if c.endpoints < 1 || c.endpoints > 10000 {
		errs = append(errs, errors.New("-endpoints must be in 1..10000"))
	}
	if n := c.members * c.services * c.endpoints; n >= 1<<24 {
		errs = append(errs, fmt.Errorf("%d endpoints in all is more than the address plan holds (2^24)", n))
	}
	if c.runs < 1 || c.runs > 99 {
		errs = append(errs, errors.New("-runs must be in 1..99"))
	}
	if c.churn < 0 || c.churnDuration < 0 || c.changes < 1 || c.workers < 1 || c.qps <= 0 || c.burst < 1 {
		errs = append(errs, errors.New("-churn and -churn-duration must not be negative; -changes, -workers, -qps and -burst must be positive"))
	}
	mode, err := endpoints.ParsePerClusterMode(c.perCluster)
	if err != nil {
		errs = append(errs, fmt.Errorf("-per-cluster-services: %w", err))
	}
	// A /24 service range: 253 usable IPs, one taken by the kubernetes
	// Service, one per derived Service.
	if mode == endpoints.PerClusterMirror && c.members*c.services+c.services+1 > 253 {
		errs = append(errs, fmt.Errorf("-per-cluster-services mirror needs %d hub ClusterIPs, but the test hub's service range (10.0.0.0/24) has 253: use headless or off, or fewer members or services",
			c.members*c.services+c.services+1))
	}
	bin, err := filepath.Abs(c.binary)
	if err == nil {
		c.binary = bin
		var fi os.FileInfo
		if fi, err = os.Stat(bin); err == nil && fi.IsDir() {
			err = fmt.Errorf("%s is a directory", bin)
		}
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("-binary: %w (build it with `make build`)", err))
	}
	return errors.Join(errs...)
}

// mode returns the validated per-cluster mode.
func (c *config) mode() endpoints.PerClusterMode {
	m, _ := endpoints.ParsePerClusterMode(c.perCluster)
	return m
}

// command is the command line that reproduces this run, for the report.
func (c *config) command() string {
	def := []string{}
	add := func(name, value, dflt string) {
		if value != dflt {
			def = append(def, "-"+name+" "+value)
		}
	}
	add("members", fmt.Sprint(c.members), "250")
	add("services", fmt.Sprint(c.services), "10")
	add("endpoints", fmt.Sprint(c.endpoints), "100")
	add("churn", fmt.Sprint(c.churn), "50")
	add("churn-duration", c.churnDuration.String(), "1m0s")
	add("changes", fmt.Sprint(c.changes), "500")
	add("runs", fmt.Sprint(c.runs), "3")
	add("workers", fmt.Sprint(c.workers), "4")
	add("qps", fmt.Sprint(c.qps), "500")
	add("burst", fmt.Sprint(c.burst), "1000")
	add("per-cluster-services", c.perCluster, string(endpoints.PerClusterHeadless))
	if len(def) == 0 {
		return "make bench"
	}
	return "make bench BENCH_FLAGS='" + strings.Join(def, " ") + "'"
}

// logf prints a progress line with the time since the start.
var start = time.Now()

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}
