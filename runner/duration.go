package runner

import (
	"fmt"
	"time"
)

// Duration is a time.Duration written as a human string ("10s", "1m30s")
// in YAML, JSON, environment variables and flags.
type Duration time.Duration

// Std returns the time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes the human form.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses the human form; a bare number is refused, since its
// unit would be a guess.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q (want e.g. 500ms, 10s, 2m)", b)
	}
	*d = Duration(v)
	return nil
}
