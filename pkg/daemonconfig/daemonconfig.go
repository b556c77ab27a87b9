package daemonconfig

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/util/retry"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

const (
	// Name is the ConfigMap's name, in the daemon's namespace. One name for
	// every release: one namespace holds one daemon's registrations.
	Name = "endpoint-aggregator-config"
	// KeyVersion is the data key of the daemon's version; every other key
	// is a flag name.
	KeyVersion = "version"
	// LabelComponent and ComponentValue mark the ConfigMap, besides
	// endpoints.LabelManagedBy.
	LabelComponent = "app.kubernetes.io/component"
	ComponentValue = "config"
	// FieldManager writes the ConfigMap.
	FieldManager = "endpoint-aggregator"
)

// Config is what a daemon publishes.
type Config struct {
	Version string
	// Flags maps flag names (without "--") to values.
	Flags map[string]string
}

// List spells a list flag's value: sorted, comma-separated, so that the
// order the flags were given in changes nothing.
func List(values []string) string {
	return strings.Join(slices.Sorted(slices.Values(values)), ",")
}

// ConfigMap is c as the ConfigMap the daemon owns in namespace.
func (c Config) ConfigMap(namespace string) *corev1.ConfigMap {
	data := maps.Clone(c.Flags)
	if data == nil {
		data = map[string]string{}
	}
	data[KeyVersion] = c.Version
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: Name, Labels: map[string]string{
			endpoints.LabelManagedBy: endpoints.ManagedByValue,
			LabelComponent:           ComponentValue,
		}},
		Data: data,
	}
}

// FromConfigMap reads a published configuration. A ConfigMap of that name
// that is not ours is an error.
func FromConfigMap(cm *corev1.ConfigMap) (Config, error) {
	if cm.Labels[endpoints.LabelManagedBy] != endpoints.ManagedByValue {
		return Config{}, fmt.Errorf("ConfigMap %s/%s is not labelled %s=%s: not the daemon's", cm.Namespace, cm.Name, endpoints.LabelManagedBy, endpoints.ManagedByValue)
	}
	c := Config{Version: cm.Data[KeyVersion], Flags: maps.Clone(cm.Data)}
	delete(c.Flags, KeyVersion)
	return c, nil
}

// String lists the flags as a command line would, sorted by name.
func (c Config) String() string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(c.Flags)) {
		out = append(out, "--"+k+"="+c.Flags[k])
	}
	return strings.Join(out, " ")
}

// Publish makes the ConfigMap in namespace hold c. It writes only when
// something differs (labels of ours missing, or data), so a daemon restarted
// with the same flags does not write; it reports whether it wrote. It never
// touches a ConfigMap of that name that is not labelled as ours.
func Publish(ctx context.Context, client typedcorev1.ConfigMapsGetter, namespace string, c Config) (bool, error) {
	want := c.ConfigMap(namespace)
	api := client.ConfigMaps(namespace)
	written := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		live, err := api.Get(ctx, Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = api.Create(ctx, want, metav1.CreateOptions{FieldManager: FieldManager})
			if apierrors.IsAlreadyExists(err) { // another replica's: compare again
				return apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, Name, err)
			}
			written = err == nil
			return err
		}
		if err != nil {
			return err
		}
		if live.Labels[endpoints.LabelManagedBy] != endpoints.ManagedByValue {
			return fmt.Errorf("ConfigMap %s/%s exists and is not managed by %s: left alone", namespace, Name, endpoints.ManagedByValue)
		}
		if live.Labels[LabelComponent] == ComponentValue && maps.Equal(live.Data, want.Data) && len(live.BinaryData) == 0 {
			return nil
		}
		upd := live.DeepCopy()
		upd.Labels[LabelComponent] = ComponentValue
		upd.Data, upd.BinaryData = want.Data, nil
		_, err = api.Update(ctx, upd, metav1.UpdateOptions{FieldManager: FieldManager})
		written = err == nil
		return err
	})
	return written, err
}

// Read returns the configuration published in namespace, nil when there is
// none (a daemon from before this package, or none ever ran).
func Read(ctx context.Context, client typedcorev1.ConfigMapsGetter, namespace string) (*Config, error) {
	cm, err := client.ConfigMaps(namespace).Get(ctx, Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c, err := FromConfigMap(cm)
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// Difference is a flag given on the command line whose value differs from
// the published one.
type Difference struct {
	Flag, Given, Published string
}

// Apply sets each flag of fs that was not given on the command line and
// that c publishes to the published value; flags fs lacks are ignored. It
// returns the flags given explicitly whose values differ from c's (they
// stay as given), and the published values fs refused (those flags keep
// their defaults).
func Apply(fs *pflag.FlagSet, c Config) (diffs []Difference, errs []error) {
	for _, name := range slices.Sorted(maps.Keys(c.Flags)) {
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		published := c.Flags[name]
		if f.Changed {
			if given := canonical(f); given != canonicalString(f, published) {
				diffs = append(diffs, Difference{Flag: name, Given: given, Published: published})
			}
			continue
		}
		if err := fs.Set(name, published); err != nil {
			errs = append(errs, fmt.Errorf("published --%s=%q: %w", name, published, err))
		}
	}
	return diffs, errs
}

// canonical spells f's value as Publish does.
func canonical(f *pflag.Flag) string {
	if s, ok := f.Value.(pflag.SliceValue); ok {
		return List(s.GetSlice())
	}
	return f.Value.String()
}

// canonicalString spells a published value of f's kind as canonical does.
func canonicalString(f *pflag.Flag, v string) string {
	if _, ok := f.Value.(pflag.SliceValue); ok {
		if v == "" {
			return ""
		}
		return List(strings.Split(v, ","))
	}
	return v
}
