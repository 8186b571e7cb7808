package detachment

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig(10 * time.Second)
	want := Config{
		Mode:                      ModeEnforce,
		DetachMargin:              10 * time.Second / 3,
		RecoverWindow:             2 * time.Second,
		KeepAliveFailureThreshold: 2,
		StorageErrorGrace:         time.Second,
	}
	if c != want {
		t.Fatalf("DefaultConfig(10s) = %+v, want %+v", c, want)
	}
	if err := c.Validate(10 * time.Second); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}

func TestValidateNamesFields(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(*Config)
		ttl    time.Duration
		fields []string
	}{
		{"unknown mode", func(c *Config) { c.Mode = "enforcing" }, ttl, []string{"Mode"}},
		{"empty mode", func(c *Config) { c.Mode = "" }, ttl, []string{"Mode"}},
		{"zero margin", func(c *Config) { c.DetachMargin = 0 }, ttl, []string{"DetachMargin"}},
		{"negative margin", func(c *Config) { c.DetachMargin = -time.Second }, ttl, []string{"DetachMargin"}},
		{"margin = ttl", func(c *Config) { c.DetachMargin = ttl }, ttl, []string{"DetachMargin"}},
		{"zero window", func(c *Config) { c.RecoverWindow = 0 }, ttl, []string{"RecoverWindow"}},
		{"zero threshold", func(c *Config) { c.KeepAliveFailureThreshold = 0 }, ttl, []string{"KeepAliveFailureThreshold"}},
		{"negative grace", func(c *Config) { c.StorageErrorGrace = -1 }, ttl, []string{"StorageErrorGrace"}},
		{"zero ttl", func(*Config) {}, 0, []string{"LeaseTTL"}},
		{"zero value", func(c *Config) { *c = Config{} }, ttl,
			[]string{"Mode", "DetachMargin", "RecoverWindow", "KeepAliveFailureThreshold", "StorageErrorGrace"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig(ttl)
			tt.edit(&c)
			err := c.Validate(tt.ttl)
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.fields[0] {
				t.Fatalf("first field = %+v, want %s", ce, tt.fields[0])
			}
			for _, f := range tt.fields {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("error %q does not name %s", err, f)
				}
			}
			if _, nerr := New(c, tt.ttl); !errors.Is(nerr, ErrInvalidConfig) {
				t.Fatalf("New accepted it: %v", nerr)
			}
		})
	}
}
