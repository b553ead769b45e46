package suite

import (
	"testing"

	"github.com/fencepub/fencepub/internal/harness/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
