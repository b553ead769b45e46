//go:build !unit

package suite

import (
	"testing"

	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
