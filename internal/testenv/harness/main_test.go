package harness

import (
	"testing"

	"github.com/tenurehq/tenure/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
