package runner

import (
	"encoding"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// EnvPrefix starts every environment variable the config reads.
const EnvPrefix = "TENURE_"

// TaskEnvPrefix starts the variables an exec: handler's command gets about
// its task (TENURE_TASK_ID, TENURE_TASK_REF, ...; see NewHandler in package
// external). They are not config: Load ignores them without a warning, so
// that the command can run tenure itself (`tenure task submit` from a
// handler). The prefix lives here rather than in external because Load
// needs it and runner does not import external.
const TaskEnvPrefix = "TENURE_TASK_"

// ConfigEnv is the environment variable that names the config file when
// none is given: TENURE_CONFIG.
const ConfigEnv = EnvPrefix + "CONFIG"

// DevConfigPath is where `tenure dev` writes its config, relative to the
// working directory.
const DevConfigPath = ".tenure-dev/tenure.yaml"

// FindConfig returns the config file to load when none is given: the one
// $TENURE_CONFIG of environ names, else DevConfigPath when it exists in the
// working directory, else "" (none). The tenure CLI finds its config so.
func FindConfig(environ []string) string {
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, ConfigEnv+"="); ok && v != "" {
			return v
		}
	}
	if _, err := os.Stat(DevConfigPath); err == nil {
		return DevConfigPath
	}
	return ""
}

// Load builds a Config: defaults, then the YAML file at path (when path is
// empty, the one FindConfig finds, as the tenure CLI does: $TENURE_CONFIG,
// else ./.tenure-dev/tenure.yaml; os.DevNull loads none), then the
// TENURE_* variables of environ, then overrides
// ("key=value", from flags, in order). Keys that derive from the lease TTL
// (keep-alive interval and timeout, detach margin, lock refresh) follow it
// unless set themselves. The result is validated.
//
// A TENURE_* variable that names no config key is ignored, not an error:
// others than Tenure set such variables (a Kubernetes Service named
// "tenure" gives every pod of its namespace TENURE_PORT,
// TENURE_SERVICE_HOST and more). Config.UnknownEnv lists them, for the one
// warning New logs (and the CLI prints); the TENURE_TASK_* variables of an
// exec: handler are left out of it. A variable that names a key with a
// value that does not parse stays an error naming the variable. When the
// config is invalid and variables were ignored, the error lists them too: a
// misspelt variable is the likely cause.
func Load(path string, environ []string, overrides []string) (Config, error) {
	c := DefaultConfig()
	if path == "" {
		path = FindConfig(environ)
	}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("%w: config file: %w", ErrInvalidConfig, err)
		}
		if err := c.decodeYAML(b); err != nil {
			return Config{}, fmt.Errorf("%w: config file %s: %w", ErrInvalidConfig, path, err)
		}
	}
	var unknown []string
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) {
			continue
		}
		if name == ConfigEnv {
			continue // names the file, not a key
		}
		key, known := EnvKey(name)
		if !known {
			if !strings.HasPrefix(name, TaskEnvPrefix) {
				unknown = append(unknown, name)
			}
			continue
		}
		if err := c.Set(key, value); err != nil {
			return Config{}, fmt.Errorf("%s: %w", name, err)
		}
	}
	for _, kv := range overrides {
		key, value, ok := strings.Cut(kv, "=")
		if !ok {
			return Config{}, fmt.Errorf("%w: %q: want key=value", ErrInvalidConfig, kv)
		}
		if err := c.Set(key, value); err != nil {
			return Config{}, err
		}
	}
	slices.Sort(unknown)
	c.unknownEnv = slices.Compact(unknown)
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		if len(c.unknownEnv) > 0 {
			err = fmt.Errorf("%w\n(ignored environment variables that name no config key: %s)", err, strings.Join(c.unknownEnv, ", "))
		}
		return Config{}, err
	}
	return c, nil
}

// UnknownEnv returns the TENURE_* environment variables Load ignored
// because they name no config key, sorted; nil for a Config Load did not
// build. The TENURE_TASK_* variables of an exec: handler are not among
// them.
func (c Config) UnknownEnv() []string { return slices.Clone(c.unknownEnv) }

// EnvKey returns the config key a TENURE_* environment variable sets, and
// whether it names one: etcd.endpoints for TENURE_ETCD_ENDPOINTS.
func EnvKey(name string) (key string, ok bool) {
	if !strings.HasPrefix(name, EnvPrefix) {
		return "", false
	}
	for _, k := range Keys() {
		if EnvName(k) == name {
			return k, true
		}
	}
	return "", false
}

// EnvName returns the environment variable of a key: TENURE_ETCD_ENDPOINTS
// for etcd.endpoints.
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(key))
}

// Keys lists every config key, in declaration order.
func Keys() []string {
	var out []string
	walk(reflect.TypeOf(Config{}), "", func(key string, _ []int) { out = append(out, key) })
	return out
}

// walk visits every leaf field of t with its dotted key and index path.
func walk(t reflect.Type, prefix string, visit func(key string, index []int)) {
	var rec func(t reflect.Type, prefix string, index []int)
	rec = func(t reflect.Type, prefix string, index []int) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if tag == "" || tag == "-" {
				continue
			}
			idx := append(slices.Clone(index), i)
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(Duration(0)) {
				rec(f.Type, prefix+tag+".", idx)
				continue
			}
			visit(prefix+tag, idx)
		}
	}
	rec(t, prefix, nil)
}

// Set sets the key to value, parsed by the field's type: numbers, booleans,
// durations ("10s"), and comma-separated lists.
func (c *Config) Set(key, value string) error {
	var index []int
	walk(reflect.TypeOf(*c), "", func(k string, idx []int) {
		if k == key {
			index = idx
		}
	})
	if index == nil {
		return fmt.Errorf("%w: unknown key %q (known: %s)", ErrInvalidConfig, key, strings.Join(Keys(), ", "))
	}
	f := reflect.ValueOf(c).Elem().FieldByIndex(index)
	if err := setValue(f, value); err != nil {
		return fmt.Errorf("%w: %s = %q: %w", ErrInvalidConfig, key, value, err)
	}
	return nil
}

func setValue(f reflect.Value, value string) error {
	if u, ok := f.Addr().Interface().(encoding.TextUnmarshaler); ok {
		return u.UnmarshalText([]byte(value))
	}
	switch f.Kind() {
	case reflect.String:
		f.SetString(value)
	case reflect.Int:
		n, err := strconv.Atoi(value)
		if err != nil {
			return errors.New("not an integer")
		}
		f.SetInt(int64(n))
	case reflect.Float64:
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return errors.New("not a number")
		}
		f.SetFloat(n)
	case reflect.Bool:
		b, err := strconv.ParseBool(value)
		if err != nil {
			return errors.New("not a boolean (true or false)")
		}
		f.SetBool(b)
	case reflect.Slice:
		var items []string
		for _, s := range strings.Split(value, ",") {
			if s = strings.TrimSpace(s); s != "" {
				items = append(items, s)
			}
		}
		f.Set(reflect.ValueOf(items))
	default:
		return fmt.Errorf("unsupported kind %s", f.Kind())
	}
	return nil
}

// Get returns the value of a key as a string.
func (c Config) Get(key string) (string, error) {
	var index []int
	walk(reflect.TypeOf(c), "", func(k string, idx []int) {
		if k == key {
			index = idx
		}
	})
	if index == nil {
		return "", fmt.Errorf("%w: unknown key %q", ErrInvalidConfig, key)
	}
	f := reflect.ValueOf(c).FieldByIndex(index)
	if m, ok := f.Interface().(encoding.TextMarshaler); ok {
		b, _ := m.MarshalText()
		return string(b), nil
	}
	if f.Kind() == reflect.Slice {
		return strings.Join(f.Interface().([]string), ","), nil
	}
	return fmt.Sprint(f.Interface()), nil
}
