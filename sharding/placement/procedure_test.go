package placement

import (
	"errors"
	"strings"
	"testing"
)

// TestProcedureNamed: both names resolve; anything else is refused with the
// known names in the error.
func TestProcedureNamed(t *testing.T) {
	for _, p := range []Procedure{ProcedureV1, ProcedureV2} {
		if got, err := ProcedureNamed(p.Name()); err != nil || got != p {
			t.Errorf("ProcedureNamed(%q) = %v, %v", p.Name(), got, err)
		}
	}
	if HashName != ProcedureV2.Name() {
		t.Errorf("HashName %q is not the current procedure", HashName)
	}
	_, err := ProcedureNamed("md5-modulo/v1")
	if !errors.Is(err, ErrUnknownProcedure) || !strings.Contains(err.Error(), HashName) {
		t.Errorf("unknown name: %v", err)
	}
}
