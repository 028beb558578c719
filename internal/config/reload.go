package config

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"

	"go.yaml.in/yaml/v3"
)

// Reloadable names the sections a running throttler takes from a reloaded
// file (SIGHUP, POST /v1/admin/reload); a change to any other needs a
// restart.
var Reloadable = []string{"auth", "defaults", "tenants", "upstreams", "limits"}

// RestartOnly lists, for a file reloaded over the running configuration
// (both with their defaults), every section outside Reloadable that
// changed, each as a problem: such a file is refused as a whole.
func RestartOnly(running, next *Config) []string {
	var out []string
	rv, nv := reflect.ValueOf(*running), reflect.ValueOf(*next)
	for i := range rv.NumField() {
		section := yamlName(rv.Type().Field(i))
		if slices.Contains(Reloadable, section) {
			continue
		}
		if !reflect.DeepEqual(rv.Field(i).Interface(), nv.Field(i).Interface()) {
			out = append(out, fmt.Sprintf("%s: changed; a reload applies only %v — restart the throttler for this change", section, Reloadable))
		}
	}
	return out
}

// Changes lists what differs between the running configuration and a
// reloaded one in the Reloadable sections, one line per key: "tenants.acme:
// changed", "auth.keys.ops: added". No line holds a value, so none holds a
// secret (a key's hash, a webhook secret).
func Changes(running, next *Config) []string {
	var out []string
	byName := func(keys []KeyConfig) map[string]KeyConfig {
		m := make(map[string]KeyConfig, len(keys))
		for _, k := range keys {
			m[k.Name] = k
		}
		return m
	}
	out = appendMapChanges(out, "auth.keys", byName(running.Auth.Keys), byName(next.Auth.Keys))
	if !reflect.DeepEqual(running.Defaults, next.Defaults) {
		out = append(out, "defaults: changed")
	}
	out = appendMapChanges(out, "tenants", running.Tenants, next.Tenants)
	out = appendMapChanges(out, "upstreams", running.Upstreams, next.Upstreams)
	return appendMapChanges(out, "limits", running.Limits, next.Limits)
}

func appendMapChanges[V any](out []string, section string, running, next map[string]V) []string {
	for _, name := range slices.Sorted(maps.Keys(running)) {
		if _, ok := next[name]; !ok {
			out = append(out, section+"."+pathKey(name)+": removed")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(next)) {
		was, ok := running[name]
		switch {
		case !ok:
			out = append(out, section+"."+pathKey(name)+": added")
		case !reflect.DeepEqual(was, next[name]):
			out = append(out, section+"."+pathKey(name)+": changed")
		}
	}
	return out
}

// ChangedKeys lists the names in the two maps whose values differ (added
// ones included, removed ones not).
func ChangedKeys[V any](running, next map[string]V) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(next)) {
		if was, ok := running[name]; !ok || !reflect.DeepEqual(was, next[name]) {
			out = append(out, name)
		}
	}
	return out
}

func yamlName(f reflect.StructField) string {
	if tag := f.Tag.Get("yaml"); tag != "" && tag != "-" {
		return tag
	}
	return f.Name
}

// Problems lists the problems of a Load or FromFlags error, one line each:
// the members of the first errors.Join in its chain (the validation
// problems, each naming its field), else the lines of a YAML decoding
// error, else its message.
func Problems(err error) []string {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			var out []string
			for _, m := range j.Unwrap() {
				out = append(out, m.Error())
			}
			return out
		}
	}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return slices.Clone(te.Errors)
	}
	return []string{err.Error()}
}

// OnSignal calls reload for each value received on sig (SIGHUP in the
// binaries; nil: never) until ctx is done or the returned stop is called,
// which waits for a reload under way. reload runs on one goroutine, one
// call at a time.
func OnSignal(ctx context.Context, sig <-chan os.Signal, reload func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				reload(ctx)
			}
		}
	}()
	return func() { cancel(); <-done }
}
